"""Issue 22 item 5 (start-up): before serving, the service re-derives its audit trail from
the last checkpoint its key signed to the head, logs the count and the time, and refuses to
serve, with one line and exit 5, a trail rewritten since (even one whose chain was
recomputed and whose anchor was removed, which `audit verify` alone accepts).

Real `serve` processes over real DuckDB files; the store is filled by a real MCP client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from engram_memory.contract.exception_codes import EXIT_UNTRUSTED
from engram_memory.contract.exceptions import AuditTrailUntrusted, StoreBehindAnchor
from engram_memory.core.startup_audit import verify_trail_at_startup
from engram_memory.crypto.checkpoint_key import CheckpointSigningKey
from engram_memory.store.connection import DATABASE_FILE
from engram_memory.store.database import Database
from tests.adversarial.evidence_support import Server, accepted, real_server
from tests.audit.chain_attacker import drop_tail, rewrite_audit_entry
from tests.cli_runner import run_cli

WHO = ("--tenant", "acme", "--workspace", "support", "--operator", "human:dana")


def _serve_once(server: Server) -> subprocess.CompletedProcess[str]:
    """Start `serve` on stdio with no client (stdin closed): it checks the store, then
    stops at end of input, or refuses to start."""
    return subprocess.run(
        [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "stdio"],
        env=server.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _entries(server: Server) -> int:
    with duckdb.connect(str(server.data_dir / DATABASE_FILE), read_only=True) as con:
        (count,) = con.execute("SELECT count(*) FROM audit_entries").fetchone() or (0,)
    return int(count)


async def _fill(server: Server, text: str) -> None:
    async with server.host() as host:
        await accepted(host, text)


@pytest.fixture
async def checkpointed(tmp_path: Path) -> Server:
    """A store with entries before and after a checkpoint the service's key signed (the
    audited request for the checkpoint is itself an entry after it). One MCP session only:
    each spawned stdio server costs a start-up on a machine shared with other work."""
    with real_server("stdio", tmp_path) as server:
        await _fill(server, "Courier refund for the lost parcel.")
        out = tmp_path / "checkpoint.json"
        signed = run_cli(server.env, "audit", "checkpoint", "--out", str(out), *WHO)
        assert signed.returncode == 0, signed.stderr
        assert _entries(server) > json.loads(out.read_text())["audit_head"]["sequence"]
        return server


async def test_a_sound_trail_is_verified_from_the_signed_checkpoint_and_served(
    checkpointed: Server,
) -> None:
    started = _serve_once(checkpointed)
    assert started.returncode == 0, started.stderr
    (line,) = [x for x in started.stderr.splitlines() if "audit trail verified" in x]
    assert "from the signed checkpoint of" in line
    assert f"(entry {_entries(checkpointed)})" in line


async def test_a_recomputed_rewrite_before_the_checkpoint_is_refused_with_one_line(
    checkpointed: Server,
) -> None:
    rewrite_audit_entry(checkpointed.data_dir, 1, "edited")
    assert checkpointed.audit_verify().returncode == 0  # the chain alone re-derives
    refused = _serve_once(checkpointed)
    assert refused.returncode == EXIT_UNTRUSTED
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


async def test_an_edit_after_the_checkpoint_is_refused(checkpointed: Server) -> None:
    last = _entries(checkpointed)
    with duckdb.connect(str(checkpointed.data_dir / DATABASE_FILE)) as con:
        con.execute("UPDATE audit_entries SET detail = 'edited' WHERE sequence = ?", [last])
    refused = _serve_once(checkpointed)
    assert refused.returncode == EXIT_UNTRUSTED, refused.stderr


async def test_a_trail_cut_below_the_checkpoint_is_behind_and_an_unsigned_start_still_checks(
    checkpointed: Server,
) -> None:
    key_file = Path(checkpointed.env["ENGRAM_CHECKPOINT_KEY"])
    key = CheckpointSigningKey.from_pem_file(key_file).public
    database = Database.open(checkpointed.data_dir)
    try:
        sound = verify_trail_at_startup(database, key)
        assert sound.checked == sound.head - sound.anchored_at > 0
        unsigned = verify_trail_at_startup(database, None, max_entries=3)
        assert (unsigned.signed_at, unsigned.checked) == (None, 3)
    finally:
        database.close()
    drop_tail(checkpointed.data_dir, keep_entries=1, scope_ref="", keep_events=0)
    database = Database.open(checkpointed.data_dir)
    try:
        with pytest.raises(StoreBehindAnchor):
            verify_trail_at_startup(database, key)
        with duckdb.connect(str(checkpointed.data_dir / DATABASE_FILE)) as con:
            con.execute("UPDATE audit_entries SET detail = 'edited' WHERE sequence = 1")
        with pytest.raises(AuditTrailUntrusted):
            verify_trail_at_startup(database, None)
    finally:
        database.close()
