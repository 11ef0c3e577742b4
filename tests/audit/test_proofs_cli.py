"""Issue 22 item 5 (proofs): `audit prove` on a real store filled by a real server and MCP
client, and `audit verify-proof` with nothing but the proof file and the checkpoint public
key: an honest proof verifies; an edited proof fails (exit 1); a proof whose checkpoint
another key signed is not trusted (exit 5); a store rewritten after an old proof no longer
proves consistent with it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb

from engram_memory.admin.host_setup import CHECKPOINT_PUBLIC_FILE
from engram_memory.contract.exception_codes import EXIT_CONFIG, EXIT_FAILED, EXIT_UNTRUSTED
from engram_memory.core import merkle
from engram_memory.core.tlog_note import open_checkpoint
from engram_memory.crypto.checkpoint_key import CheckpointPublicKey, CheckpointSigningKey
from engram_memory.store.connection import DATABASE_FILE
from tests.adversarial.evidence_support import accepted, real_server
from tests.audit.chain_attacker import rewrite_audit_entry
from tests.cli_runner import run_cli

# The auditor's environment: no store, no private key, only what they were handed.
AUDITOR = {"PATH": os.environ.get("PATH", "")}


async def test_inclusion_and_consistency_proofs_are_checked_with_only_the_public_key(
    tmp_path: Path,
) -> None:
    with real_server("stdio", tmp_path) as server:
        async with server.host() as host:
            await accepted(host, "Courier refund for the lost parcel.")
            await accepted(host, "Second parcel arrived damaged.")
    env = server.env
    public = Path(env["ENGRAM_CHECKPOINT_KEY"]).parent / CHECKPOINT_PUBLIC_FILE
    size = _tree_size(server.data_dir)
    inclusion, consistency = tmp_path / "inclusion.json", tmp_path / "consistency.json"
    data = ("--data-dir", str(server.data_dir))
    assert run_cli(env, "audit", "prove", "3", *data, "--out", str(inclusion)).returncode == 0
    made = run_cli(
        env, "audit", "prove", "--consistency", "2", str(size), *data, "--out", str(consistency)
    )
    assert made.returncode == 0, made.stderr

    def verify(proof: Path, key: Path = public) -> int:
        argv = ("audit", "verify-proof", str(proof), "--checkpoint-public-key", str(key))
        return run_cli(AUDITOR, *argv).returncode

    assert verify(inclusion) == 0
    assert verify(consistency) == 0
    document = json.loads(inclusion.read_text())
    assert document["tree_size"] == size
    # The note alone says the size and the root; the root is that of the entry hashes.
    signed_size, root = open_checkpoint(
        document["checkpoint"], CheckpointPublicKey.from_pem_file(public)
    )
    assert (signed_size, root) == (size, merkle.root(_leaf_hashes(server.data_dir)))

    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps({**document, "entry": 4}))
    assert verify(edited) == EXIT_FAILED
    other = tmp_path / "other.pem"
    other.write_text(CheckpointSigningKey.generate().public.pem())
    assert verify(inclusion, other) == EXIT_UNTRUSTED

    # An attacker rewrites entry 1 and recomputes the chain: the old proof's tree is no
    # longer a prefix of what the store now proves.
    rewrite_audit_entry(server.data_dir, 1, "edited")
    later = tmp_path / "later.json"
    assert (
        run_cli(
            env, "audit", "prove", "--consistency", "2", str(size), *data, "--out", str(later)
        ).returncode
        == 0
    )
    mixed = json.loads(later.read_text())
    mixed["old_checkpoint"] = json.loads(consistency.read_text())["old_checkpoint"]
    tampered = tmp_path / "mixed.json"
    tampered.write_text(json.dumps(mixed))
    assert verify(tampered) == EXIT_FAILED

    assert (
        run_cli(env, "audit", "prove", "999", *data, "--out", str(later)).returncode == EXIT_CONFIG
    )
    assert run_cli(env, "audit", "prove", *data, "--out", str(later)).returncode == EXIT_CONFIG


def _leaf_hashes(data_dir: Path) -> list[bytes]:
    with duckdb.connect(str(data_dir / DATABASE_FILE), read_only=True) as con:
        rows = con.execute("SELECT entry_hash FROM audit_entries ORDER BY sequence").fetchall()
    return [merkle.entry_leaf(str(h)) for (h,) in rows]


def _tree_size(data_dir: Path) -> int:
    return len(_leaf_hashes(data_dir))
