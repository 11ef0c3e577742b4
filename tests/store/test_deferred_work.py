"""Tidying queued for the next write transaction: it rides on a write, never on a read, comes
back if that write fails, and is settled at close."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.store import key_intents
from engram_memory.store.database import Database

SCOPE = "tenant:acme/workspace:support"
OTHER = "tenant:globex/workspace:main"


def _pending(database: Database) -> list[tuple[str, str]]:
    with database.reading() as tx:
        return key_intents.pending(tx)


def _queue_clear(database: Database, pairs: list[tuple[str, str]]) -> None:
    database.deferred.add(lambda tx: key_intents.clear(tx, pairs))


def test_a_queued_clear_runs_in_the_next_write_and_removes_only_its_own_pairs(
    tmp_path: Path,
) -> None:
    database = Database.open(tmp_path)
    with database.transaction() as tx:
        key_intents.promise(tx, SCOPE, ["cand_1", "mem_1"], "tombstone", 1)
        key_intents.promise(tx, OTHER, ["cand_1"], "withdraw", 1)
    _queue_clear(database, [(SCOPE, "cand_1")])
    with database.transaction() as tx:
        key_intents.pending(tx)  # a transaction that only reads carries no tidying
    assert len(database.deferred) == 1
    with database.transaction() as tx:
        key_intents.promise(tx, SCOPE, ["mem_2"], "tombstone", 2)
    assert len(database.deferred) == 0
    assert _pending(database) == [(SCOPE, "mem_1"), (SCOPE, "mem_2"), (OTHER, "cand_1")]
    database.close()


def _write_then_fail(database: Database) -> None:
    with database.transaction() as tx:
        key_intents.promise(tx, SCOPE, ["cand_2"], "withdraw", 2)
        raise RuntimeError("the call failed after its statements")


def test_a_write_that_fails_puts_the_queued_work_back(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    with database.transaction() as tx:
        key_intents.promise(tx, SCOPE, ["cand_1"], "withdraw", 1)
    _queue_clear(database, [(SCOPE, "cand_1")])
    with pytest.raises(RuntimeError):
        _write_then_fail(database)
    assert len(database.deferred) == 1
    assert _pending(database) == [(SCOPE, "cand_1")]
    database.settle_deferred()
    assert _pending(database) == []
    database.close()


def test_closing_the_store_settles_what_is_queued(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    with database.transaction() as tx:
        key_intents.promise(tx, SCOPE, ["cand_1"], "withdraw", 1)
    _queue_clear(database, [(SCOPE, "cand_1")])
    database.close()
    reopened = Database.open(tmp_path)
    assert _pending(reopened) == []
    reopened.close()


def test_a_queued_clear_never_removes_a_promise_the_next_write_makes_of_the_same_item(
    tmp_path: Path,
) -> None:
    database = Database.open(tmp_path)
    with database.transaction() as tx:
        key_intents.promise(tx, SCOPE, ["cand_1"], "accept", 1)
    _queue_clear(database, [(SCOPE, "cand_1")])  # its key is gone
    with database.transaction() as tx:  # a forget promises the same item's key again
        key_intents.promise(tx, SCOPE, ["cand_1", "mem_1"], "tombstone", 2)
    assert _pending(database) == [(SCOPE, "cand_1"), (SCOPE, "mem_1")]
    database.close()
