"""Issue 20 on the real server process: the background projector (store/projector.py) is
SIGKILLed while it projects reads the call log acknowledged, before its COMMIT and between its
COMMIT and the log's release. Either way the restarted server serves, and every acknowledged
read has exactly one audit entry: replayed from the log when the COMMIT never landed, skipped
when the file's projected position says it is there.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import anyio
import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.failpoints import KILL_AFTER_PROJECTION, KILL_DURING_PROJECTION
from engram_memory.crypto.keys import RootKey
from engram_memory.store.call_log import DIRECTORY, SegmentLog
from engram_memory.store.database import Database
from engram_memory.store.projection import read_position
from tests.faults.integrity_support import Acknowledged, audit_trail, audit_verify
from tests.faults.keys_support import ALICE, CAPTURE, DEATH_TIMEOUT_S, Secrets, server_life
from tests.servers import server_env

pytestmark = pytest.mark.e2e

SEARCH = "engram_memory_search"
SIGKILLED = -9


def _search() -> dict[str, str]:
    return {"query": f"refund {uuid.uuid4().hex[:8]}", "purpose_ref": ALICE.purpose_ref}


async def _search_then_die(base: Path, failpoint: str) -> tuple[Acknowledged, Secrets, int]:
    """A capture (its own transaction), then one search, answered from the call log; the
    background projection of its entry kills the server at the armed point."""
    secrets = Secrets(*init_host_dir(base / "secrets"))
    data_dir = base / "data"
    env = server_env(data_dir, secrets.root_key, secrets.public_keys)
    async with server_life(data_dir, secrets, f"{failpoint}:{SEARCH}") as life:
        capture = demo_capture_arguments("Refund approved.", f"c-{uuid.uuid4().hex}")
        assert (await life.call(CAPTURE, capture))["ok"] is True
        assert (await life.call(SEARCH, _search()))["ok"] is True
        status = await anyio.to_thread.run_sync(life.process.wait, DEATH_TIMEOUT_S)
    return Acknowledged(data_dir, env, secrets.signer), secrets, status


def _projected_position(data_dir: Path) -> int:
    database = Database.open(data_dir, read_only=True)
    try:
        with database.reading(audit_complete=False) as tx:
            return read_position(tx)
    finally:
        database.close()


def _log_head(data_dir: Path, secrets: Secrets) -> int:
    log = SegmentLog(data_dir / DIRECTORY, RootKey.load(secrets.root_key).call_log_key())
    try:
        return log.durable_head().sequence
    finally:
        log.close()


async def _serve_one_search(store: Acknowledged, secrets: Secrets) -> None:
    async with server_life(store.data_dir, secrets) as life:
        assert (await life.call(SEARCH, _search()))["ok"] is True


def _searches(store: Acknowledged) -> int:
    return [tool for tool, _, _ in audit_trail(store.data_dir)].count(SEARCH)


def test_a_kill_during_a_background_projection_replays_the_read_at_start(
    tmp_path: Path,
) -> None:
    store, secrets, status = asyncio.run(_search_then_die(tmp_path, KILL_DURING_PROJECTION))
    assert status == SIGKILLED
    assert _searches(store) == 0  # the projection's COMMIT never ran
    assert _projected_position(store.data_dir) < _log_head(store.data_dir, secrets)

    asyncio.run(_serve_one_search(store, secrets))
    assert _searches(store) == 2  # the acknowledged one, replayed once, and the new one
    verified = audit_verify(store)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_kill_between_a_projections_commit_and_the_release_writes_nothing_twice(
    tmp_path: Path,
) -> None:
    store, secrets, status = asyncio.run(_search_then_die(tmp_path, KILL_AFTER_PROJECTION))
    assert status == SIGKILLED
    assert _searches(store) == 1  # committed with its position ...
    head = _log_head(store.data_dir, secrets)
    assert _projected_position(store.data_dir) == head  # ... and still in the log

    asyncio.run(_serve_one_search(store, secrets))
    assert _searches(store) == 2  # skipped at start: the position says it is there
    verified = audit_verify(store)
    assert verified.returncode == 0, verified.stdout + verified.stderr
