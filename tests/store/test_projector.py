"""The background projector (store/projector.py): DuckDB follows the call log while the writer
is idle, so a writing transaction finds nothing pending; a failed background projection keeps
its records pending for the next transaction; a close drains what is left.

Each test waits on the projector's probe (an event set at a named point), never on time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_memory.contract.exceptions import StoreUnavailable
from engram_memory.store import audit
from engram_memory.store.database import Database
from engram_memory.store.logged_calls import AFTER_COMMIT, BEFORE_BEGIN, BEFORE_COMMIT
from engram_memory.store.projection import Projection, read_position
from engram_memory.store.projector import BackgroundProjector
from tests.store.test_projection import RecordingLog, _count, _log, _record

WAIT_S = 30.0  # a bound on a wait that the probe ends, never a pause


class Probe:
    """Records each point a background projection reached and lets a test wait for one."""

    def __init__(self) -> None:
        self.points: list[tuple[str, frozenset[str]]] = []
        self.committed = threading.Event()

    def __call__(self, point: str, tools: frozenset[str]) -> None:
        self.points.append((point, tools))
        if point == AFTER_COMMIT:
            self.committed.set()

    def wait_committed(self) -> None:
        assert self.committed.wait(WAIT_S), "the background projection never committed"
        self.committed.clear()


@pytest.fixture
def projecting(tmp_path: Path) -> Iterator[tuple[Database, RecordingLog, Probe]]:
    database = Database.open(tmp_path / "data")
    log = _log(tmp_path / "data")
    database.attach_call_log(log)
    probe = Probe()
    database.start_projector(probe)
    yield database, log, probe
    database.close()


def _projection(database: Database) -> Projection:
    projection = database._projection
    assert projection is not None
    return projection


def test_an_append_is_projected_in_the_background_and_released_after_its_commit(
    projecting: tuple[Database, RecordingLog, Probe],
) -> None:
    database, log, probe = projecting
    database.append_logged([_record(1)], [])
    probe.wait_committed()
    # The probe ran before the log released anything: the release follows the commit.
    assert [point for point, _ in probe.points] == [BEFORE_BEGIN, BEFORE_COMMIT, AFTER_COMMIT]
    assert probe.points[-1][1] == frozenset({"engram_memory_get"})
    with database._lock:  # the projector released the log before it let go of the writer
        assert log.released == [1]
    assert _projection(database).pending() == 0
    assert _count(database, "audit_entries") == 1
    with database.reading(audit_complete=False) as tx:
        assert read_position(tx) == 1


def test_a_transaction_after_a_background_projection_writes_nothing_of_the_log(
    projecting: tuple[Database, RecordingLog, Probe], monkeypatch: pytest.MonkeyPatch
) -> None:
    database, _, probe = projecting
    database.append_logged([_record(1)], [])
    probe.wait_committed()
    written: list[int | None] = []
    original = Projection.write_pending

    def recording(self: Projection, tx: Any) -> int | None:
        written.append(original(self, tx))
        return written[-1]

    monkeypatch.setattr(Projection, "write_pending", recording)
    with database.transaction() as tx:
        audit.append_all(tx, [_record(2)])
    assert written == []  # nothing was pending: the mutation paid for no read
    with database.reading() as tx:
        assert audit.verify(tx) == (2, 2)


def test_a_failed_background_projection_leaves_its_records_to_the_next_transaction(
    projecting: tuple[Database, RecordingLog, Probe], monkeypatch: pytest.MonkeyPatch
) -> None:
    database, log, probe = projecting
    failed = threading.Event()
    original = Projection.write_pending

    def fail_after_writing(self: Projection, tx: Any) -> int | None:
        original(self, tx)
        failed.set()
        raise StoreUnavailable("statement failed")

    monkeypatch.setattr(Projection, "write_pending", fail_after_writing)
    database.append_logged([_record(1)], [])
    assert failed.wait(WAIT_S)
    monkeypatch.setattr(Projection, "write_pending", original)
    with database.transaction() as tx:  # waits for the failed one's rollback (the lock)
        audit.append_all(tx, [_record(2)])
    assert not probe.committed.is_set()
    assert log.released == [1]  # released by the transaction that projected it
    assert _count(database, "audit_entries") == 2
    with database.reading() as tx:
        assert audit.verify(tx) == (2, 2)


def test_a_close_drains_what_the_projector_left_pending(tmp_path: Path) -> None:
    database = Database.open(tmp_path / "data")
    database.attach_call_log(_log(tmp_path / "data"))
    paused, release = threading.Event(), threading.Event()

    def hold(point: str, tools: frozenset[str]) -> None:
        if point == BEFORE_BEGIN:  # the projector is busy elsewhere: nothing is projected
            paused.set()
            assert release.wait(WAIT_S)

    database.start_projector(hold)
    database.append_logged([_record(1)], [])
    database.append_logged([_record(2)], [])
    assert paused.wait(WAIT_S)
    assert _count(database, "audit_entries") == 0
    release.set()
    database.close()

    again = Database.open(tmp_path / "data")
    try:
        assert _count(again, "audit_entries") == 2
        with again.reading(audit_complete=False) as tx:
            assert read_position(tx) == 2
            assert audit.verify(tx) == (2, 2)
    finally:
        again.close()


def test_a_stream_of_appends_is_projected_at_half_the_bound_without_waiting_for_a_pause() -> None:
    projected = threading.Event()
    # Appends never pause for an hour: only half the bound reached starts the projection.
    projector = BackgroundProjector(projected.set, lambda: True, idle_s=3600.0)
    projector.start()
    try:
        projector.appended()
        assert projected.wait(WAIT_S)
    finally:
        projector.stop()


def test_an_append_goes_on_while_a_background_projection_holds_the_writer(tmp_path: Path) -> None:
    database = Database.open(tmp_path / "data")
    database.attach_call_log(_log(tmp_path / "data"))
    inside, release = threading.Event(), threading.Event()

    def hold(point: str, tools: frozenset[str]) -> None:
        if point == BEFORE_COMMIT and not inside.is_set():  # the first projection only
            inside.set()
            assert release.wait(WAIT_S)

    database.start_projector(hold)
    try:
        database.append_logged([_record(1)], [])
        assert inside.wait(WAIT_S)  # the projection of entry 1 holds the connection's lock
        appended = threading.Thread(target=database.append_logged, args=([_record(2)], []))
        appended.start()
        appended.join(WAIT_S)
        assert not appended.is_alive()  # the append did not wait for the projection
        assert database.heads()[1].audit[0] == 2
        release.set()
        with database.transaction() as tx:  # writes entry 2 if the projector has not yet
            audit.append_all(tx, [_record(3)])
        with database.reading() as tx:
            assert audit.verify(tx) == (3, 3)
    finally:
        release.set()
        database.close()
