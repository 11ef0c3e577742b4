"""Signed checkpoints catch what `audit verify` alone cannot: a chain recomputed after an
edit, or a removed tail, by someone who can write the store but holds no key.

Real DuckDB files and the real `engram-memory` CLI (its `main(argv)`, in this process: issue
19) on a stopped store; tests/audit/test_checkpoint_channel.py covers a running server.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from engram_memory.admin.checkpointing import CheckpointService, verify_manifest
from engram_memory.admin.maintenance import Operator
from engram_memory.admin.verification import export_data_dir
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import CheckpointInvalid, ToolError
from engram_memory.core.checkpoint_verify import CheckpointResult, verify_against_checkpoint
from engram_memory.core.checkpoints import (
    CheckpointWriter,
    checkpoint_document,
    keep_checkpoint,
    take_checkpoint,
    write_checkpoint_file,
)
from engram_memory.core.runtime import Services
from engram_memory.crypto.checkpoint_key import CheckpointSigningKey
from engram_memory.store import checkpoints as rows
from engram_memory.store.database import Database
from tests.audit.chain_attacker import (
    delete_stored_checkpoints,
    drop_tail,
    rewrite_audit_entry,
    rewrite_journal_event,
)
from tests.cli_runner import run_cli
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record

KEY = CheckpointSigningKey.generate()
OTHER_KEY = CheckpointSigningKey.generate()


@dataclass
class Store:
    services: Services
    data_dir: Path
    public_key: Path
    now_ms: int = 1_800_000_000_000

    def checkpoint(self, path: Path, *, keep: bool = False) -> dict[str, object]:
        """Sign the heads now; write `path`; with `keep`, store it as the service would."""
        self.now_ms += 1000
        with self.services.database.reading() as tx:
            document = take_checkpoint(tx, KEY, self.now_ms)
        write_checkpoint_file(document, path)
        if keep:
            with self.services.database.transaction() as tx:
                keep_checkpoint(tx, document, "interval")
        return dict(document)

    def close(self) -> None:
        self.services.database.close()

    def compare(self, checkpoint: Path, export_dir: Path | None = None) -> CheckpointResult:
        database = Database.open(self.data_dir, read_only=True)
        try:
            with database.transaction() as tx:
                return verify_against_checkpoint(
                    tx,
                    json.loads(checkpoint.read_text()),
                    KEY.public,
                    export_dir=export_dir,
                )
        finally:
            database.close()


@pytest.fixture
def store(services: Services, tmp_path: Path) -> Store:
    public = tmp_path / "checkpoint-public.pem"
    public.write_text(KEY.public.pem())
    return Store(services, tmp_path / "data", public)


def _calls(alice: Caller, count: int) -> None:
    for i in range(count):
        accepted_record(alice, f"Refund {i} approved.")


def _head(store: Store) -> int:
    return store.services.database.heads()[1].audit[0]


def _scope(store: Store) -> str:
    return next(iter(store.services.database.heads()[1].journal))


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI's code and output, in this process with this process's environment."""
    return run_cli(dict(os.environ), *argv)


def _exit_code(*argv: str) -> int:
    return _cli(*argv).returncode


def _verify(store: Store, *extra: str) -> int:
    return _exit_code("audit", "verify", "--data-dir", str(store.data_dir), *extra)


def _verify_manifest(store: Store, export_dir: Path) -> int:
    return _exit_code(
        "audit",
        "verify-manifest",
        str(export_dir),
        "--checkpoint-public-key",
        str(store.public_key),
    )


def _verify_in_a_process(store: Store, *extra: str) -> subprocess.CompletedProcess[str]:
    return _cli("audit", "verify", "--data-dir", str(store.data_dir), *extra)


def test_a_store_that_grew_past_its_checkpoint_verifies_against_it(
    alice: Caller, store: Store, tmp_path: Path
) -> None:
    _calls(alice, 2)
    checkpoint = tmp_path / "kept.json"
    store.checkpoint(checkpoint)
    _calls(alice, 2)
    store.close()
    assert store.compare(checkpoint).extends
    done = _verify_in_a_process(
        store, "--checkpoint", str(checkpoint), "--checkpoint-public-key", str(store.public_key)
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_recomputed_chain_passes_plain_verify_but_not_the_checkpoint_which_names_the_entry(
    alice: Caller, store: Store, tmp_path: Path
) -> None:
    _calls(alice, 3)
    store.close()
    export_dir = tmp_path / "export"
    export_data_dir(store.data_dir, export_dir, KEY)  # checkpoint.json beside the export
    signed_at = _signed_sequence(export_dir / "checkpoint.json")
    edited = signed_at - 2

    rewrite_audit_entry(store.data_dir, edited, "nothing to see")
    assert _verify(store) == 0  # the threat: the recomputed chain re-derives

    result = store.compare(export_dir / "checkpoint.json", export_dir)
    assert [(d.chain, d.kind, d.first) for d in result.divergences] == [
        ("audit", "rewritten", edited)
    ]
    done = _verify_in_a_process(
        store,
        "--checkpoint",
        str(export_dir / "checkpoint.json"),
        "--checkpoint-public-key",
        str(store.public_key),
    )
    assert done.returncode == 1, done.stdout + done.stderr


def test_without_an_export_a_rewrite_is_placed_between_the_signed_positions_around_it(
    alice: Caller, store: Store, tmp_path: Path
) -> None:
    _calls(alice, 2)
    store.checkpoint(tmp_path / "early.json", keep=True)
    early = _head(store)
    _calls(alice, 2)
    later = tmp_path / "later.json"
    store.checkpoint(later)
    late = _head(store)
    store.close()

    rewrite_audit_entry(store.data_dir, early + 2, "edited")
    divergence = store.compare(later).divergences[0]
    assert (divergence.kind, divergence.first, divergence.low, divergence.high) == (
        "rewritten",
        None,
        early + 1,
        late,
    )

    delete_stored_checkpoints(store.data_dir)  # the attacker removes what it can
    divergence = store.compare(later).divergences[0]
    assert (divergence.low, divergence.high) == (1, late)


def test_a_removed_tail_fails_naming_the_first_missing_sequence_and_cursor(
    alice: Caller, store: Store, tmp_path: Path
) -> None:
    _calls(alice, 3)
    checkpoint = tmp_path / "kept.json"
    document = store.checkpoint(checkpoint)
    scope = _scope(store)
    store.close()
    signed = _sequence(document)
    drop_tail(store.data_dir, keep_entries=signed - 3, scope_ref=scope, keep_events=2)
    assert _verify(store) == 0  # the shorter chains are intact

    found = {d.chain: (d.kind, d.first) for d in store.compare(checkpoint).divergences}
    assert found == {
        "audit": ("truncated", signed - 2),
        f"journal {scope}": ("truncated", 3),
    }
    assert (
        _verify(
            store, "--checkpoint", str(checkpoint), "--checkpoint-public-key", str(store.public_key)
        )
        == 1
    )


def test_a_rewritten_journal_event_is_named_by_its_cursor_with_the_export(
    alice: Caller, store: Store, tmp_path: Path
) -> None:
    _calls(alice, 2)
    scope = _scope(store)
    store.close()
    export_dir = tmp_path / "export"
    export_data_dir(store.data_dir, export_dir, KEY)
    rewrite_journal_event(store.data_dir, scope, 2)
    assert _verify(store) == 0

    found = [
        (d.chain, d.first)
        for d in store.compare(export_dir / "checkpoint.json", export_dir).divergences
    ]
    assert found == [(f"journal {scope}", 2)]


def test_a_forged_or_foreign_checkpoint_is_refused(
    alice: Caller, store: Store, tmp_path: Path
) -> None:
    _calls(alice, 1)
    checkpoint = tmp_path / "kept.json"
    document = store.checkpoint(checkpoint)
    store.close()

    forged = json.loads(json.dumps(document))
    forged["audit_head"]["sequence"] -= 1  # an older head, the signature kept
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    foreign = checkpoint_document(
        (_sequence(document), forged["audit_head"]["entry_hash"]), {}, OTHER_KEY, 0
    )
    (tmp_path / "foreign.json").write_text(json.dumps(foreign))
    for name in ("forged.json", "foreign.json"):
        with pytest.raises(CheckpointInvalid):
            store.compare(tmp_path / name)
        assert (
            _verify(
                store,
                "--checkpoint",
                str(tmp_path / name),
                "--checkpoint-public-key",
                str(store.public_key),
            )
            == 5
        )


def test_the_export_manifest_is_signed_and_timestamped_and_any_change_is_detected(
    alice: Caller, store: Store, tmp_path: Path
) -> None:
    _calls(alice, 1)
    store.close()
    export_dir = tmp_path / "export"
    manifest = export_data_dir(store.data_dir, export_dir, KEY)
    assert manifest["signature"] is not None
    assert str(manifest["exported_at"]).endswith("Z")
    assert verify_manifest(export_dir, KEY.public) == []
    assert _verify_manifest(store, export_dir) == 0

    parquet = export_dir / "audit_entries.parquet"
    parquet.write_bytes(parquet.read_bytes() + b"\0")
    assert verify_manifest(export_dir, KEY.public) != []
    assert _verify_manifest(store, export_dir) == 1

    written = json.loads((export_dir / "manifest.json").read_text())
    written["files"][0]["sha256"] = "0" * 64  # hide the change in the manifest
    (export_dir / "manifest.json").write_text(json.dumps(written))
    with pytest.raises(CheckpointInvalid):
        verify_manifest(export_dir, KEY.public)
    done = _cli(
        "audit",
        "verify-manifest",
        str(export_dir),
        "--checkpoint-public-key",
        str(store.public_key),
    )
    assert done.returncode == 5, done.stdout + done.stderr


def test_without_a_checkpoint_key_the_manifest_is_timestamped_and_says_it_is_unsigned(
    alice: Caller, store: Store, tmp_path: Path
) -> None:
    _calls(alice, 1)
    store.close()
    manifest = export_data_dir(store.data_dir, tmp_path / "export", None)
    assert manifest["signature"] is None
    assert "exported_at" in manifest
    assert not (tmp_path / "export" / "checkpoint.json").exists()
    with pytest.raises(CheckpointInvalid):
        verify_manifest(tmp_path / "export", KEY.public)


def test_the_interval_writer_signs_a_checkpoint_when_due_and_only_when_a_head_moved(
    alice: Caller, store: Store
) -> None:
    clock = [1_000_000]
    writer = CheckpointWriter(store.services.database, KEY, 60_000, lambda: clock[0])
    _calls(alice, 1)
    assert writer.write_if_due() is None  # not due yet
    clock[0] += 60_000
    first = writer.write_if_due()
    assert first is not None
    clock[0] += 60_000
    assert writer.write_if_due() is None  # due, but nothing moved
    _calls(alice, 1)
    clock[0] += 60_000
    second = writer.write_if_due()
    assert second is not None
    assert _sequence(dict(second)) > _sequence(dict(first))
    with store.services.database.reading() as tx:
        kept = [json.loads(text) for text in rows.stored_documents(tx)]
    assert kept == [first, second]
    assert writer.written == 2


def _sequence(document: dict[str, object]) -> int:
    head = document["audit_head"]
    assert isinstance(head, dict)
    return int(head["sequence"])


def _signed_sequence(path: Path) -> int:
    return _sequence(json.loads(path.read_text()))


def test_a_checkpoint_on_request_is_written_kept_and_audited_and_needs_a_key(
    alice: Caller, store: Store, tmp_path: Path
) -> None:
    _calls(alice, 1)
    dana = Operator("acme", "support", "human:dana")
    with pytest.raises(ToolError) as refused:
        CheckpointService(store.services).checkpoint(dana, tmp_path / "none.json", print)
    assert refused.value.code is ErrorCode.CAPABILITY_UNAVAILABLE

    store.services.checkpoint_key = KEY
    before = _head(store)
    value = CheckpointService(store.services).checkpoint(dana, tmp_path / "kept.json", print)
    assert value["audit_sequence"] == before  # the refusal above is audited too
    assert _head(store) == before + 1  # and so is this request
    with store.services.database.reading() as tx:
        kept = [json.loads(text) for text in rows.stored_documents(tx)]
    assert kept == [json.loads((tmp_path / "kept.json").read_text())]

    stranger = Operator("acme", "support", "human:nobody")
    with pytest.raises(ToolError) as unauthorized:
        CheckpointService(store.services).checkpoint(stranger, tmp_path / "x.json", print)
    assert unauthorized.value.code is ErrorCode.UNAUTHORIZED
