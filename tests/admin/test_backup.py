"""Encrypted backup and verified restore: round trip, tamper and truncation are BACKUP_INVALID,
a foreign root, a schema skew, an old archive or a non-empty target are RESTORE_REFUSED."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.backup import FORMAT, FORMAT_VERSION, BackupService
from engram_memory.admin.maintenance import Operator
from engram_memory.admin.restore import RestoreRequest, restore
from engram_memory.admin.verification import verify_data_dir
from engram_memory.contract.canonical import canonical_json
from engram_memory.contract.exceptions import ToolError
from engram_memory.core.runtime import Services
from engram_memory.crypto.archive import HEADER_BYTES, ArchiveWriter
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.store.database import Database
from engram_memory.store.schema import SCHEMA_VERSION
from engram_memory.tools.dispatch import MemoryService
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record, capture, forget, value

DANA = Operator("acme", "support", "human:dana")  # read + maintain
ERIN = Operator("acme", "support", "human:erin")  # read only
SCOPE = "tenant:acme/workspace:support"
CANARY = "Canary plaintext 7f3a: refund approved for the Okonkwo account."


def _request(services: Services, **changes: Any) -> RestoreRequest:
    fields: dict[str, Any] = {
        "root": services.root_key,
        "decider": services.decider,
        "host_keys": services.host_keys,
        "clock_ms": services.clock_ms,
        **changes,
    }
    return RestoreRequest(**fields)


def _code(call: Any) -> str:
    with pytest.raises(ToolError) as refused:
        call()
    return refused.value.code.name


def _restore_code(request: RestoreRequest, archive: Path, target: Path) -> str:
    with pytest.raises(ToolError) as refused:
        restore(request, DANA, archive, target, print)
    return refused.value.code.name


@pytest.fixture
def archive(alice: Caller, services: Services, tmp_path: Path) -> tuple[Path, str]:
    record_id = accepted_record(alice, CANARY)
    out = tmp_path / "store.backup"
    lines: list[str] = []
    result = BackupService(services).backup(DANA, out, lines.append)
    assert result["files"] == len(list(services.keys.directory.rglob("*.key"))) + 2
    assert any("archived" in line for line in lines)
    return out, record_id


@contextmanager
def _restored_service(services: Services, data_dir: Path) -> Iterator[Caller]:
    database = Database.open(data_dir)
    try:
        yield Caller(
            MemoryService(
                Services(
                    database=database,
                    keys=KeyStore(data_dir / KEYS_DIRECTORY),
                    decider=services.decider,
                    root_key=services.root_key,
                    host_keys=services.host_keys,
                    settings=services.settings,
                )
            )
        )
    finally:
        database.close()


def test_restored_store_serves_the_same_records(
    alice: Caller, services: Services, archive: tuple[Path, str], tmp_path: Path
) -> None:
    out, record_id = archive
    original = value(
        alice.call("engram_memory_get", {"record_id": record_id, "purpose_ref": alice.purpose_ref})
    )
    lines: list[str] = []

    restore(_request(services), DANA, out, tmp_path / "restored", lines.append)

    assert any("verified" in line for line in lines)
    with _restored_service(services, tmp_path / "restored") as restored:
        again = value(
            restored.call(
                "engram_memory_get", {"record_id": record_id, "purpose_ref": alice.purpose_ref}
            )
        )
        found = value(
            restored.call(
                "engram_memory_search", {"query": "okonkwo", "purpose_ref": alice.purpose_ref}
            )
        )
    assert again["record"] == original["record"]
    assert [r["record"]["record_id"] for r in found["records"]] == [record_id]
    events, entries, _ = verify_data_dir(tmp_path / "restored")
    assert events > 0
    assert entries > 0
    with (
        _restored_service(services, tmp_path / "restored") as restored,
        restored.service.services.database.transaction() as tx,
    ):
        restores = tx.fetchall(
            "SELECT outcome FROM audit_entries WHERE tool = 'admin:restore' ORDER BY sequence"
        )
    assert restores == [("ok",)]


def test_the_archive_never_holds_the_plaintext(archive: tuple[Path, str]) -> None:
    data = archive[0].read_bytes()
    assert CANARY.encode() not in data
    assert b"okonkwo" not in data.lower()
    assert b"tenant:acme" not in data  # not even the store's metadata


def test_a_flipped_byte_anywhere_is_backup_invalid(
    services: Services, archive: tuple[Path, str], tmp_path: Path
) -> None:
    data = archive[0].read_bytes()
    offsets = [0, 9, 20, 50, 60, HEADER_BYTES, HEADER_BYTES + 2, HEADER_BYTES + 100]
    offsets += [len(data) // 3, len(data) // 2, len(data) - 17, len(data) - 1]
    for offset in offsets:
        damaged = bytearray(data)
        damaged[offset] ^= 0x01
        path = tmp_path / f"damaged-{offset}"
        path.write_bytes(bytes(damaged))
        target = tmp_path / f"out-{offset}"
        assert _restore_code(_request(services), path, target) == "BACKUP_INVALID", offset
        assert not target.exists()
    assert not list(tmp_path.glob(".out-*"))  # staging directories are removed


def test_a_truncated_or_extended_archive_is_backup_invalid(
    services: Services, archive: tuple[Path, str], tmp_path: Path
) -> None:
    data = archive[0].read_bytes()
    first_chunk_end = HEADER_BYTES + 4 + int.from_bytes(data[HEADER_BYTES : HEADER_BYTES + 4])
    for index, variant in enumerate(
        [data[: len(data) // 2], data[:first_chunk_end], data[:-1], data + b"\0"]
    ):
        path = tmp_path / f"variant-{index}"
        path.write_bytes(variant)
        target = tmp_path / f"out-{index}"
        assert _restore_code(_request(services), path, target) == "BACKUP_INVALID"
        assert not target.exists()


def test_an_archive_made_under_another_root_key_is_refused(
    services: Services, archive: tuple[Path, str], tmp_path: Path
) -> None:
    stranger = _request(services, root=RootKey(os.urandom(32)))
    assert _code(lambda: restore(stranger, DANA, archive[0], tmp_path / "x", print)) == (
        "RESTORE_REFUSED"
    )
    rotated = _request(services, root=services.root_key.rotated())  # holds it as previous
    restore(rotated, DANA, archive[0], tmp_path / "y", print)


def test_a_non_empty_target_is_refused_and_left_alone(
    services: Services, archive: tuple[Path, str], tmp_path: Path
) -> None:
    target = tmp_path / "occupied"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    assert _code(lambda: restore(_request(services), DANA, archive[0], target, print)) == (
        "RESTORE_REFUSED"
    )
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    restore(_request(services), DANA, archive[0], empty, print)  # an empty directory is fine


def test_an_archive_older_than_the_retention_bound_is_refused(
    services: Services, archive: tuple[Path, str], tmp_path: Path
) -> None:
    def later() -> int:
        return services.clock_ms() + 31 * 86_400_000

    old = _request(services, clock_ms=later)
    assert _code(lambda: restore(old, DANA, archive[0], tmp_path / "x", print)) == (
        "RESTORE_REFUSED"
    )
    longer = _request(services, clock_ms=later, max_age_days=60)
    restore(longer, DANA, archive[0], tmp_path / "y", print)


def _crafted(services: Services, path: Path, **manifest: Any) -> None:
    sink = io.BytesIO()
    writer = ArchiveWriter(sink, services.root_key)
    body = canonical_json(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "schema_version": SCHEMA_VERSION,
            "created_at": "2026-01-01T00:00:00.000Z",
            "created_at_ms": services.clock_ms(),
            "root_key_id": services.root_key.key_id.hex(),
            "files": [],
            "audit_head": None,
            "journal_heads": {},
            **manifest,
        }
    )
    writer.write(len(body).to_bytes(4, "big") + body)
    writer.finish()
    path.write_bytes(sink.getvalue())


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ({"schema_version": SCHEMA_VERSION + 1}, "RESTORE_REFUSED"),
        ({"format_version": FORMAT_VERSION + 1}, "RESTORE_REFUSED"),
        ({"root_key_id": "00" * 8}, "BACKUP_INVALID"),
        ({"files": [{"path": "../escape", "size": 1, "sha256": "0" * 64}]}, "BACKUP_INVALID"),
        ({"files": [{"path": "engram.duckdb", "size": 3, "sha256": "0" * 64}]}, "BACKUP_INVALID"),
        ({"journal_heads": {"tenant:globex/workspace:main": {}}}, "UNAUTHORIZED"),
    ],
)
def test_authentic_archives_with_a_bad_manifest_are_refused(
    services: Services, tmp_path: Path, manifest: dict[str, Any], expected: str
) -> None:
    path = tmp_path / "crafted"
    _crafted(services, path, **manifest)
    assert _code(lambda: restore(_request(services), DANA, path, tmp_path / "x", print)) == (
        expected
    )
    assert not (tmp_path / "x").exists()


def test_a_backup_of_a_broken_audit_chain_does_not_restore(
    alice: Caller, services: Services, tmp_path: Path
) -> None:
    accepted_record(alice, "Chain to be broken.")
    with services.database.transaction() as tx:
        tx.execute("UPDATE audit_entries SET outcome = 'forged' WHERE sequence = 1")
    out = tmp_path / "broken.backup"
    BackupService(services).backup(DANA, out, print)
    assert _code(lambda: restore(_request(services), DANA, out, tmp_path / "x", print)) == (
        "BACKUP_INVALID"
    )


def test_backup_and_restore_need_the_maintain_authority(
    alice: Caller, services: Services, archive: tuple[Path, str], tmp_path: Path
) -> None:
    out = tmp_path / "by-reader.backup"
    assert _code(lambda: BackupService(services).backup(ERIN, out, print)) == "UNAUTHORIZED"
    assert not out.exists()
    assert _code(lambda: restore(_request(services), ERIN, archive[0], tmp_path / "x", print)) == (
        "UNAUTHORIZED"
    )
    with services.database.transaction() as tx:
        outcomes = tx.fetchall(
            "SELECT outcome FROM audit_entries WHERE tool = 'admin:backup' ORDER BY sequence"
        )
    assert [row[0] for row in outcomes] == ["ok", "UNAUTHORIZED"]


def test_an_existing_archive_is_never_overwritten(
    services: Services, archive: tuple[Path, str]
) -> None:
    before = archive[0].read_bytes()
    assert _code(lambda: BackupService(services).backup(DANA, archive[0], print)) == (
        "STORE_UNAVAILABLE"
    )
    assert archive[0].read_bytes() == before


def test_a_backup_needs_maintain_in_every_scope_of_the_store(
    alice: Caller, services: Services, tmp_path: Path
) -> None:
    accepted_record(alice, "One scope of two.")
    with services.database.transaction() as tx:
        tx.execute(
            "INSERT INTO journal_events VALUES (?, 1, 'e', 'capture', 't', '{}', 'h', 'h', 'i')",
            ["tenant:globex/workspace:main"],
        )
    out = tmp_path / "store.backup"
    assert _code(lambda: BackupService(services).backup(DANA, out, print)) == "UNAUTHORIZED"
    assert not out.exists()


def test_a_key_whose_destruction_was_committed_is_never_archived(
    alice: Caller, services: Services, tmp_path: Path
) -> None:
    """The archive holds the keys of the snapshot's live items, not whatever the key
    directory still holds: a forgotten record's key file that survived (its destruction
    still pending) stays out, so a restore cannot resurrect the content."""
    kept = accepted_record(alice, "Kept through the backup.")
    gone = accepted_record(alice, "Forgotten before the backup.")
    value(forget(alice, gone))
    survivor = services.keys.path_for(SCOPE, gone)
    survivor.write_bytes(services.keys.path_for(SCOPE, kept).read_bytes())

    out = tmp_path / "store.backup"
    BackupService(services).backup(DANA, out, lambda _line: None)
    restore(_request(services), DANA, out, tmp_path / "restored", lambda _line: None)

    restored = KeyStore(tmp_path / "restored" / KEYS_DIRECTORY)
    assert restored.get(SCOPE, gone) is None
    assert restored.load_item_key(services.root_key, SCOPE, kept) is not None


def test_a_backup_is_a_snapshot_that_writes_during_it_neither_break_nor_enter(
    alice: Caller, services: Services, tmp_path: Path
) -> None:
    """While the backup runs (at its first progress line), a capture commits, the store is
    checkpointed (its file changes) and a record is forgotten. The backup still succeeds; the
    restored store is the snapshot: without that capture, and with the forgotten record,
    which was live at the snapshot point, still readable (docs/operators/backup.md: backups and
    shredding)."""
    kept = accepted_record(alice, "Kept through the backup.")
    forgotten_later = accepted_record(alice, "Forgotten while the backup runs.")
    landed_later: list[str] = []

    def meanwhile(_line: str) -> None:
        if landed_later:
            return
        landed_later.append(capture(alice, "Captured while the backup runs.")["candidate_id"])
        services.database.checkpoint()
        value(forget(alice, forgotten_later))

    out = tmp_path / "store.backup"
    BackupService(services).backup(DANA, out, meanwhile)
    restore(_request(services), DANA, out, tmp_path / "restored", lambda _line: None)

    verify_data_dir(tmp_path / "restored")
    with _restored_service(services, tmp_path / "restored") as restored:
        for record_id in (kept, forgotten_later):
            get = {"record_id": record_id, "purpose_ref": alice.purpose_ref}
            assert value(restored.call("engram_memory_get", get))
        with restored.service.services.database.transaction() as tx:
            later = tx.fetchall(
                "SELECT candidate_id FROM candidates WHERE candidate_id = ?", [landed_later[0]]
            )
    assert later == []
