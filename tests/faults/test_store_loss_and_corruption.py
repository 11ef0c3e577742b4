"""Issue 7 items 2 and 3 on the real server process: a store that lost acknowledged writes,
or a damaged one, is refused at startup with one line and its own exit code, `audit verify`
fails, and the refused start writes nothing, so no idempotency key can silently re-execute.
After `admin accept-loss` the server serves again and the audit trail records the loss.

One server acknowledges the captures and is SIGKILLed (they are in the WAL only); each test
damages its own copy of that data directory.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import duckdb
import pytest

from engram_memory.client.reference_host import connect
from engram_memory.store.connection import DATABASE_FILE
from tests.faults.integrity_support import (
    ALICE,
    CAPTURE,
    EXIT_BEHIND_ANCHOR,
    EXIT_DAMAGED,
    Acknowledged,
    accept_loss,
    acknowledge_then_kill,
    audit_trail,
    audit_verify,
    capture_value,
    checkpoint_offline,
    flip_byte_at,
    serve_one_capture,
    start,
    store_files,
)
from tests.servers import http_server

pytestmark = pytest.mark.e2e
ACKNOWLEDGED = 8


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Acknowledged:
    return asyncio.run(acknowledge_then_kill(tmp_path_factory.mktemp("acked"), ACKNOWLEDGED))


def _refused(store: Acknowledged, exit_code: int) -> str:
    """The start is refused with `exit_code` and exactly one line; nothing is written."""
    before = store_files(store.data_dir)
    started = start(store)
    assert started.returncode == exit_code, started.stderr
    lines = started.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert store_files(store.data_dir) == before  # no call ran, no key re-executed
    verified = audit_verify(store, own_process=True)
    assert verified.returncode == exit_code, verified.stdout + verified.stderr
    assert verified.stdout.startswith("FAILED"), verified.stdout
    return lines[0]


def _accept(store: Acknowledged) -> None:
    """The operator accepts the loss: the store verifies and the audit records it."""
    accepted = accept_loss(store, "reason:wal-lost-no-backup")
    assert accepted.returncode == 0, accepted.stderr
    assert '"loss_found": true' in accepted.stdout
    assert audit_verify(store).returncode == 0
    acceptances = [e for e in audit_trail(store.data_dir) if e[0] == "admin:accept-loss"]
    assert len(acceptances) == 1
    assert acceptances[0][1] == "ok"
    assert '"anchored"' in acceptances[0][2]  # anchored vs actual heads are recorded


def test_the_acknowledged_store_verifies_and_replays_every_key(
    killed: Acknowledged, tmp_path: Path
) -> None:
    # The control: without damage the store starts, verifies and replays each capture.
    store = killed.copy_to(tmp_path / "data")
    assert audit_verify(store).returncode == 0

    async def replay() -> None:
        with http_server(store.env) as (_, url):
            async with connect(url, store.signer, ALICE) as host:
                for arguments, candidate_id in store.captures:
                    again = capture_value(await host.call(CAPTURE, arguments))
                    assert again["candidate_id"] == candidate_id

    asyncio.run(replay())


async def test_a_wal_truncated_to_half_is_refused_until_the_loss_is_accepted(
    killed: Acknowledged, tmp_path: Path
) -> None:
    store = killed.copy_to(tmp_path / "data")
    with store.wal.open("r+b") as wal:
        wal.truncate(store.wal.stat().st_size // 2)
    _refused(store, EXIT_BEHIND_ANCHOR)
    _accept(store)
    value = await serve_one_capture(store, "Written after the loss was accepted.")
    assert value["status"] == "committed_pending"
    assert audit_verify(store).returncode == 0


def test_a_deleted_wal_is_refused(killed: Acknowledged, tmp_path: Path) -> None:
    store = killed.copy_to(tmp_path / "data")
    store.wal.unlink()
    _refused(store, EXIT_BEHIND_ANCHOR)


def test_a_removed_last_journal_event_and_audit_entry_are_refused(
    killed: Acknowledged, tmp_path: Path
) -> None:
    store = killed.copy_to(tmp_path / "data")
    connection = duckdb.connect(str(store.data_dir / DATABASE_FILE))
    connection.execute(
        "DELETE FROM journal_events WHERE cursor = (SELECT max(cursor) FROM journal_events)"
    )
    connection.execute(
        "DELETE FROM audit_entries WHERE sequence = (SELECT max(sequence) FROM audit_entries)"
    )
    connection.close()
    _refused(store, EXIT_BEHIND_ANCHOR)
    _accept(store)


def test_a_flipped_byte_in_a_data_block_is_refused_as_damaged(
    killed: Acknowledged, tmp_path: Path
) -> None:
    store = killed.copy_to(tmp_path / "data")
    checkpoint_offline(store.data_dir)
    path = store.data_dir / DATABASE_FILE
    # A block the store uses: the one holding an acknowledged candidate's id.
    offset = path.read_bytes().find(store.captures[-1][1].encode())
    assert offset > 0
    flip_byte_at(path, offset)
    assert "damaged" in _refused(store, EXIT_DAMAGED)


def test_a_damaged_block_no_start_step_reads_stops_the_serving_process_with_exit_4(
    killed: Acknowledged, tmp_path: Path
) -> None:
    """The full read runs once serving started (core/integrity_scan.py): a damaged block the
    start does not read still ends the real server process with exit 4, and `audit verify`
    refuses the store. The captures' ids are in several tables; each is damaged in turn until
    one is met only by the scan, i.e. after the server printed what it prints once serving."""
    pristine = killed.copy_to(tmp_path / "pristine")
    checkpoint_offline(pristine.data_dir)
    intact = (pristine.data_dir / DATABASE_FILE).read_bytes()
    needle = pristine.captures[0][1].encode()
    offsets = [i for i in range(len(intact)) if intact.startswith(needle, i)]
    assert offsets
    for n, offset in enumerate(offsets):
        store = pristine.copy_to(tmp_path / f"damaged-{n}")
        flip_byte_at(store.data_dir / DATABASE_FILE, offset)
        try:
            started = start(store)
        except subprocess.TimeoutExpired:
            continue  # a block no table scan reads (an index): a call reading it fails closed
        assert started.returncode == EXIT_DAMAGED, started.stderr
        if len(started.stderr.strip().splitlines()) > 1:  # served first, then stopped
            verified = audit_verify(store, own_process=True)
            assert verified.returncode == EXIT_DAMAGED, verified.stdout + verified.stderr
            return
    pytest.fail("every damaged block was met before serving; none by the scan")


def test_a_damaged_header_is_refused_as_damaged(killed: Acknowledged, tmp_path: Path) -> None:
    store = killed.copy_to(tmp_path / "data")
    checkpoint_offline(store.data_dir)
    path = store.data_dir / DATABASE_FILE
    with path.open("r+b") as handle:  # both database headers (DuckDB keeps two)
        for header in (4096, 8192):
            handle.seek(header + 16)
            handle.write(os.urandom(32))
    assert "damaged" in _refused(store, EXIT_DAMAGED)
