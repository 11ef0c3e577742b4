"""The call log as the commit point of audit-only calls, DuckDB as their projection
(store/projection.py, store/logged_calls.py): the chain is the one direct writes make, a crash
between append and projection re-projects exactly once, and the log releases only what a
committed projection holds."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from engram_memory.contract.exceptions import (
    StoreBehindAnchor,
    StoreCorrupt,
    StoreUnavailable,
)
from engram_memory.policy.receipts import make_receipt
from engram_memory.store import audit
from engram_memory.store.call_log import SegmentLog
from engram_memory.store.database import Database
from engram_memory.store.projection import Projection, read_position

KEY = bytes(range(32))


def _record(n: int, *, claim_until: int | None = None) -> audit.AuditRecord:
    receipt = make_receipt(
        policy_path="engram/authz",
        policy_input={"n": n},
        result={"allow": True, "reasons": ["r"]},
        bundle_revision="rev",
        bundle_digest="sha256:" + "0" * 64,
        engine_id="test",
        engine_version="1",
        decided_at_ms=n,
    )
    return audit.AuditRecord(
        recorded_at=f"2026-01-01T00:00:{n % 60:02d}.000Z",
        audit_id=f"audit-{n}",
        scope_ref="scope:a",
        principal_ref="p",
        agent_ref="g",
        session_ref="s",
        tool="engram_memory_get",
        outcome="ok",
        bundle_digest="sha256:" + "0" * 64,
        bundle_revision="rev",
        target_ids=(f"r{n}",),
        receipts=(receipt,),
        audit_id_kept_until_ms=claim_until,
    )


class RecordingLog(SegmentLog):
    """A segment log that remembers what it was allowed to release."""

    released: list[int]

    def release_through(self, sequence: int) -> None:
        self.released.append(sequence)
        super().release_through(sequence)


def _log(data_dir: Path) -> RecordingLog:
    log = RecordingLog(data_dir / "calllog", KEY)
    log.released = []
    return log


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[tuple[Database, RecordingLog]]:
    database = Database.open(tmp_path / "data")
    log = _log(tmp_path / "data")
    database.attach_call_log(log)
    yield database, log
    database.close()


def _rows(database: Database) -> list[tuple[Any, ...]]:
    with database.reading(audit_complete=False) as tx:
        return tx.fetchall("SELECT * FROM audit_entries ORDER BY sequence") + tx.fetchall(
            "SELECT * FROM decision_receipts ORDER BY decision_id"
        )


def _count(database: Database, table: str) -> int:
    with database.reading(audit_complete=False) as tx:
        row = tx.fetchone(f"SELECT count(*) FROM {table}")  # noqa: S608 - a test's own names
    assert row is not None
    return int(row[0])


def _direct(database: Database, records: Sequence[audit.AuditRecord]) -> None:
    with database.transaction() as tx:
        audit.append_all(tx, records)


def test_logged_and_direct_writes_interleave_into_the_chain_direct_writes_make(
    logged: tuple[Database, RecordingLog], tmp_path: Path
) -> None:
    database, _ = logged
    records = [_record(n) for n in range(1, 6)]  # a receipt's decision id is random
    database.append_logged(records[0:2], [])
    _direct(database, records[2:3])  # the transaction projects 1 and 2 first
    database.append_logged(records[3:4], [])
    database.append_logged(records[4:5], [])
    database.project()

    reference = Database.open(tmp_path / "reference")
    try:
        for record in records:
            _direct(reference, [record])
        assert _rows(database) == _rows(reference)
        assert database.heads()[1].audit == reference.heads()[1].audit
    finally:
        reference.close()
    with database.reading() as tx:
        assert audit.verify(tx) == (5, 5)


def test_a_hot_path_read_takes_no_transaction_and_an_audit_read_sees_every_entry(
    logged: tuple[Database, RecordingLog],
) -> None:
    database, log = logged
    database.append_logged([_record(1)], [])
    assert _count(database, "audit_entries") == 0  # pending: the hot-path read left it
    assert database.heads()[1].audit[0] == 1  # but the writer's head has it
    with database.reading() as tx:  # an audit reader projects first
        assert audit.verify(tx) == (1, 1)
    assert log.released == [1]


def test_a_crash_between_append_and_projection_replays_each_record_exactly_once(
    logged: tuple[Database, RecordingLog], tmp_path: Path
) -> None:
    database, _ = logged
    database.append_logged([_record(1)], [])
    database.project()
    database.append_logged([_record(2), _record(3)], [("audit-2", 10**15)])
    database.append_logged([_record(4)], [])
    # The process dies now: on disk are the file (record 1 projected) and the log (1-3).
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "data", crashed)

    for released in ([3], []):  # the second start finds nothing more to replay
        again = Database.open(crashed)
        log = _log(crashed)
        again.attach_call_log(log)
        assert log.released == released
        assert _count(again, "audit_entries") == 4
        assert _count(again, "used_audit_ids") == 1
        with again.reading() as tx:
            assert audit.verify(tx) == (4, 4)
            assert read_position(tx) == 3
        again.close()


def test_a_failed_projection_keeps_its_records_pending_and_releases_nothing(
    logged: tuple[Database, RecordingLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    database, log = logged
    database.append_logged([_record(1)], [])
    original = Projection.write_pending

    def fail_after_writing(self: Projection, tx: Any) -> int | None:
        original(self, tx)
        raise StoreUnavailable("statement failed")

    monkeypatch.setattr(Projection, "write_pending", fail_after_writing)
    with pytest.raises(StoreUnavailable):
        database.project()
    assert log.released == []
    assert _count(database, "audit_entries") == 0  # rolled back with its position

    monkeypatch.setattr(Projection, "write_pending", original)
    database.project()
    assert log.released == [1]
    assert _count(database, "audit_entries") == 1


def test_an_unknown_commit_outcome_is_read_back_before_the_next_projection(
    logged: tuple[Database, RecordingLog],
) -> None:
    database, _ = logged
    database.append_logged([_record(1)], [])
    projection = database._projection
    assert projection is not None
    # The projection committed, but its caller never learned it (COMMIT raised).
    with database._direct_transaction() as tx:
        projection.write_pending(tx)
    projection.outcome_unknown()
    database.append_logged([_record(2)], [])
    database.project()  # without reading the position back, entry 1 would be written twice
    with database.reading() as tx:
        assert audit.verify(tx) == (2, 2)


def test_pending_records_past_the_bound_are_projected_by_the_append(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    log = _log(tmp_path)
    database.attach_call_log(log)
    projection = database._projection
    assert projection is not None
    projection._bound = 3
    for n in range(1, 4):
        database.append_logged([_record(n)], [])
    assert projection.pending() == 0
    assert _count(database, "audit_entries") == 3
    database.close()


def test_a_repeated_claim_never_stops_the_projection(
    logged: tuple[Database, RecordingLog],
) -> None:
    database, _ = logged
    database.append_logged([_record(1, claim_until=5_000)], [("audit-1", 9_000)])
    database.append_logged([], [("audit-1", 7_000)], prune_before_ms=6_000)
    database.project()
    with database.reading() as tx:
        assert audit.used_audit_ids(tx, 0) == [("audit-1", 9_000)]


def test_a_log_behind_its_projection_is_refused(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    database.attach_call_log(_log(tmp_path))
    database.append_logged([_record(1)], [])
    database.close()  # projects
    shutil.rmtree(tmp_path / "calllog")
    again = Database.open(tmp_path)
    log = _log(tmp_path)
    with pytest.raises(StoreCorrupt):
        again.attach_call_log(log)
    log.close()
    again.close(checkpoint=False)


def test_a_log_that_does_not_follow_the_files_audit_trail_is_refused(tmp_path: Path) -> None:
    database = Database.open(tmp_path / "data")
    database.attach_call_log(_log(tmp_path / "data"))
    _direct(database, [_record(1)])
    database.append_logged([_record(2)], [])  # logged after entry 1, not yet projected
    # The file then loses entry 1 (as with a lost WAL).
    with database._direct_transaction() as tx:
        tx.execute("DELETE FROM decision_receipts WHERE audit_id = 'audit-1'")
        tx.execute("DELETE FROM audit_entries WHERE sequence = 1")
    database.close(checkpoint=False)
    again = Database.open(tmp_path / "data")
    log = _log(tmp_path / "data")
    with pytest.raises(StoreBehindAnchor):
        again.attach_call_log(log, project=False)
    log.close()
    again.close(checkpoint=False)


def test_a_transaction_writes_the_pending_records_first_and_a_rollback_keeps_them(
    logged: tuple[Database, RecordingLog],
) -> None:
    database, log = logged
    database.append_logged([_record(1)], [])

    def failing_call() -> None:
        with database.transaction() as tx:
            audit.append(tx, _record(2))
            raise RuntimeError("the caller fails")

    with pytest.raises(RuntimeError):
        failing_call()
    assert _count(database, "audit_entries") == 0
    assert log.released == []
    _direct(database, [_record(2)])  # one transaction: the pending record, then its own
    assert log.released == [1]
    with database.reading() as tx:
        assert audit.verify(tx) == (2, 2)


def test_projecting_is_no_commit_of_the_call_on_this_thread(
    logged: tuple[Database, RecordingLog],
) -> None:
    database, _ = logged
    database.append_logged([_record(1)], [])
    before = database.commits_on_this_thread()
    with database.transaction():
        pass  # a transaction that writes nothing of its own
    database.append_logged([_record(2)], [])
    database.project()
    assert database.commits_on_this_thread() == before
    assert _count(database, "audit_entries") == 2


def test_a_prepared_entry_re_derives_without_the_store() -> None:
    batch = audit.prepare([_record(1), _record(2, claim_until=9)], (0, "sha256:" + "0" * 64))
    assert [audit.prepared_row_hash(row) for row in batch.rows] == batch.hashes()
    tampered = list(batch.rows[0])
    tampered[8] = "denied"  # the outcome
    assert audit.prepared_row_hash(tampered) != batch.hashes()[0]
