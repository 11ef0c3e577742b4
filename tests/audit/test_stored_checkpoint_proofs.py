"""Issue 22 item 5, stored checkpoints: every checkpoint the service signs carries the audit
tree's size and root as a C2SP tlog-checkpoint note, so a proof is checked against a
checkpoint issued earlier with only the public key, and a trail rewritten since fails.
Format 1 checkpoints (heads only, written before) stay readable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engram_memory.contract.exception_codes import EXIT_CONFIG, EXIT_FAILED
from engram_memory.contract.exceptions import CheckpointInvalid
from engram_memory.core import merkle
from engram_memory.core.checkpoint_verify import parse_checkpoint
from engram_memory.core.checkpoints import (
    HEADS_ONLY_FORMAT,
    CheckpointWriter,
    checkpoint_document,
    signed_tree,
    write_checkpoint_file,
)
from engram_memory.core.runtime import Services
from engram_memory.core.tlog_note import open_checkpoint
from engram_memory.crypto.checkpoint_key import CheckpointSigningKey
from engram_memory.store import checkpoints as rows
from tests.audit.chain_attacker import delete_stored_checkpoints, rewrite_audit_entry
from tests.cli_runner import run_cli
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record

KEY = CheckpointSigningKey.generate()
AUDITOR = {"PATH": os.environ.get("PATH", "")}  # no store, no private key


def test_the_frontier_builds_the_rfc_9162_root_at_every_size() -> None:
    leaves = [merkle.leaf_hash(str(i).encode()) for i in range(70)]
    frontier = merkle.Frontier()
    assert frontier.root() == merkle.root([])
    for size, leaf in enumerate(leaves, 1):
        frontier.append(leaf)
        assert (frontier.size, frontier.root()) == (size, merkle.root(leaves[:size]))


def _interval_checkpoint(writer: CheckpointWriter, now_ms: int, path: Path) -> int:
    """Let the service's interval writer sign and store one; the auditor keeps `path`."""
    document = writer.write_if_due(now_ms)
    assert document is not None
    assert signed_tree(document, KEY.public) is not None
    write_checkpoint_file(document, path)
    return int(json.loads(path.read_text())["tree"]["size"])


def _verify(proof: Path, public: Path, *kept: str) -> int:
    argv = ("audit", "verify-proof", str(proof), "--checkpoint-public-key", str(public), *kept)
    return run_cli(AUDITOR, *argv).returncode


def _prove(data_dir: Path, out: Path, *argv: str) -> int:
    # No checkpoint key: the notes must be those the service stored.
    env = {"PATH": os.environ.get("PATH", "")}
    made = run_cli(env, "audit", "prove", *argv, "--data-dir", str(data_dir), "--out", str(out))
    return made.returncode


def test_proofs_check_against_stored_checkpoints_and_a_rewrite_fails(
    services: Services, alice: Caller, tmp_path: Path
) -> None:
    public = tmp_path / "checkpoint-public.pem"
    public.write_text(KEY.public.pem())
    now = 1_800_000_000_000
    writer = CheckpointWriter(services.database, KEY, 1000, lambda: now)
    accepted_record(alice, "Parcel one refunded.")
    old = _interval_checkpoint(writer, now + 1000, tmp_path / "old.json")
    accepted_record(alice, "Parcel two refunded.")
    accepted_record(alice, "Parcel three refunded.")  # audit-only steps go through the log
    new = _interval_checkpoint(writer, now + 2000, tmp_path / "new.json")
    assert 0 < old < new
    data_dir = services.keys.directory.parent
    services.database.close()

    consistency, inclusion = tmp_path / "consistency.json", tmp_path / "inclusion.json"
    assert _prove(data_dir, consistency, "--consistency", str(old), str(new)) == 0
    assert _prove(data_dir, inclusion, "1", "--tree-size", str(old)) == 0
    # The notes in the proofs are the stored ones, signed when those sizes were reached.
    stored = json.loads(consistency.read_text())
    assert (
        stored["old_checkpoint"] == json.loads((tmp_path / "old.json").read_text())["tree"]["note"]
    )
    assert open_checkpoint(stored["checkpoint"], KEY.public)[0] == new
    assert _verify(consistency, public) == 0
    assert _verify(consistency, public, "--checkpoint", str(tmp_path / "old.json")) == 0
    assert _verify(inclusion, public, "--checkpoint", str(tmp_path / "old.json")) == 0
    assert _verify(inclusion, public, "--checkpoint", str(tmp_path / "new.json")) == EXIT_FAILED
    # A size no checkpoint was stored for needs the key to sign one now.
    assert _prove(data_dir, inclusion, "1", "--tree-size", str(new - 1)) == EXIT_CONFIG

    # Someone who can write the store rewrites entry 1 and recomputes the chain: the stored
    # old checkpoint no longer joins what the store now proves.
    rewrite_audit_entry(data_dir, 1, "edited")
    rewritten = tmp_path / "rewritten.json"
    assert _prove(data_dir, rewritten, "--consistency", str(old), str(new)) == 0
    assert _verify(rewritten, public) == EXIT_FAILED
    # Removing the stored checkpoints and signing fresh notes does not help: the auditor
    # checks against the one they kept.
    delete_stored_checkpoints(data_dir)
    key_file = tmp_path / "checkpoint.pem"
    KEY.write_pem_files(key_file, tmp_path / "again-public.pem")
    resigned = tmp_path / "resigned.json"
    made = run_cli(
        {"PATH": os.environ.get("PATH", ""), "ENGRAM_CHECKPOINT_KEY": str(key_file)},
        "audit", "prove", "--consistency", str(old), str(new), "--data-dir", str(data_dir),
        "--out", str(resigned),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert _verify(resigned, public) == 0  # self-consistent, freshly signed over the rewrite
    assert _verify(resigned, public, "--checkpoint", str(tmp_path / "old.json")) == EXIT_FAILED


def test_format_1_checkpoints_stay_readable(
    services: Services, alice: Caller, tmp_path: Path
) -> None:
    accepted_record(alice, "Parcel four refunded.")
    services.database.project()
    with services.database.reading() as tx:
        document = checkpoint_document(rows.audit_head(tx), rows.journal_heads(tx), KEY, 0)
    assert document["format"] == HEADS_ONLY_FORMAT
    assert "tree" not in document
    heads = parse_checkpoint(document, KEY.public)
    assert heads.audit == services.database.heads()[1].audit
    kept = tmp_path / "v1.json"
    write_checkpoint_file(document, kept)
    public = tmp_path / "public.pem"
    public.write_text(KEY.public.pem())
    proof = tmp_path / "p.json"
    proof.write_text("{}")
    assert _verify(proof, public, "--checkpoint", str(kept)) == EXIT_CONFIG


@pytest.mark.parametrize("field", ["size", "root"])
def test_a_tree_that_disagrees_with_its_note_is_not_trusted(
    services: Services, alice: Caller, field: str
) -> None:
    accepted_record(alice, "Parcel five refunded.")
    writer = CheckpointWriter(services.database, KEY, 1000, lambda: 0)
    document = writer.write_if_due(5000)
    assert document is not None
    tree = dict(document["tree"])  # type: ignore[arg-type]
    tree[field] = 1 if field == "size" else "AAAA"
    forged = {**document, "tree": tree}
    with pytest.raises(CheckpointInvalid):
        signed_tree(forged, KEY.public)
