"""Side writes (store/side_writes.py): a transaction outside the writer's lock that maps driver
errors like every other, stops on a damaged file, never moves a chain head and is not counted
as a commit of the calling thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import StoreCorrupt, StoreUnavailable
from engram_memory.store import journal
from engram_memory.store.database import Database
from engram_memory.store.transaction import Transaction
from tests.store.test_damaged_store import _store_with_a_damaged_block

SCOPE = "tenant:acme/workspace:support"


def _documents(database: Database) -> int:
    with database.reading() as tx:
        row = tx.fetchone("SELECT count(*) FROM lexical_documents")
    assert row is not None
    return int(row[0])


def _insert_document(tx: Transaction, record_id: str) -> None:
    tx.execute(
        "INSERT INTO lexical_documents VALUES (?, ?, '{}', NULL)",
        [SCOPE, record_id],
    )


def test_a_side_write_commits_while_the_writer_is_held_and_is_no_commit_of_the_thread(
    tmp_path: Path,
) -> None:
    database = Database.open(tmp_path)
    commits = database.commits_on_this_thread()
    writer_held, side_done = threading.Event(), threading.Event()

    def hold_the_writer() -> None:
        with database.transaction():
            writer_held.set()
            assert side_done.wait(timeout=60)

    holder = threading.Thread(target=hold_the_writer)
    holder.start()
    assert writer_held.wait(timeout=60)
    with database.side_write() as tx:  # would deadlock if it took the writer's lock
        _insert_document(tx, "rec_side")
    side_done.set()
    holder.join()

    assert _documents(database) == 1
    assert database.commits_on_this_thread() == commits
    database.close()


def _moving_a_head(database: Database) -> None:
    with database.side_write() as tx:
        _insert_document(tx, "rec_head")
        journal.append(tx, SCOPE, event_id="e1", operation="capture", target_id="c", fields={})


def _inserting_twice(database: Database) -> None:
    with database.side_write() as tx:
        _insert_document(tx, "rec_twice")
        _insert_document(tx, "rec_twice")  # primary key: the statement fails, all rolls back


def test_a_side_write_that_fails_or_moves_a_head_leaves_nothing(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    with pytest.raises(ValueError, match="chain head"):
        _moving_a_head(database)
    with pytest.raises(StoreUnavailable):
        _inserting_twice(database)
    assert _documents(database) == 0
    assert database.heads()[0] == 0
    assert not database.damaged
    database.close()


def test_a_side_write_stops_the_store_on_damage_and_is_refused_once_stopped(
    tmp_path: Path,
) -> None:
    _store_with_a_damaged_block(tmp_path)
    database = Database.open(tmp_path)
    with pytest.raises(StoreCorrupt), database.side_write() as tx:
        tx.count_rows("SELECT * FROM filler")
    assert database.damaged
    with pytest.raises(StoreCorrupt), database.side_write() as tx:
        _insert_document(tx, "rec_after")
    database.close()
