"""store/batched_writes.py: the same rows as one-row statements, in far fewer statements.

The same writes go once through a plain transaction and once through `BatchedWrites` into two
real DuckDB files; every table touched must then hold the same rows. Reads in between must see
every write before them, and a candidate ended in the same batch is written once, ended.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engram_memory.contract.exceptions import StoreUnavailable
from engram_memory.store import key_intents, memory
from engram_memory.store.batched_writes import BatchedWrites
from engram_memory.store.database import Database
from engram_memory.store.transaction import Transaction

SCOPE = "tenant:acme/workspace:support"
OTHER = "tenant:acme/workspace:other"
NOW = 1_790_000_000_000


def _candidate(candidate_id: str, cursor: int) -> memory.CandidateRow:
    return memory.CandidateRow(
        candidate_id=candidate_id,
        state="pending",
        principal_ref="user:alice",
        payload_digest=f"payload-{candidate_id}",
        guard_digest=f"guard-{candidate_id}",
        record_digest=f"record-{candidate_id}",
        record_id=f"rec-{candidate_id}",
        capture_cursor=cursor,
        sealed_body=b"\x00sealed" + candidate_id.encode(),
    )


def _writes(tx: Transaction) -> None:
    """Candidates (one ended in the same batch, one left pending, the same id in two scopes),
    postings through an INSERT ... SELECT, and a multi-row key promise."""
    for n, scope in enumerate((SCOPE, SCOPE, OTHER)):
        memory.insert_candidate(tx, scope, _candidate(f"c{min(n, 1)}", n), NOW)
    key_intents.end_candidate(tx, SCOPE, "c0", "accepted", NOW + 1)
    key_intents.promise(tx, SCOPE, ["c0", "c9"], "accept", NOW)
    postings = memory.posting_batch([("t1", "body", 2), ("t2", "title", 1)])
    memory.index_document(tx, SCOPE, "rec-c0", {"body": 3}, None, [postings])
    memory.index_document(tx, SCOPE, "rec-c1", {"body": 1}, 5, [postings])


def _tables(data: Path) -> dict[str, list[tuple[Any, ...]]]:
    database = Database.open(data, read_only=True)
    try:
        with database.reading() as tx:
            return {
                table: tx.fetchall(f"SELECT * FROM {table} ORDER BY ALL")  # noqa: S608
                for table in (
                    "candidates",
                    "key_destructions",
                    "lexical_documents",
                    "lexical_postings",
                )
            }
    finally:
        database.close(checkpoint=False)


def _load(data: Path, wrap: Callable[[Transaction], Transaction]) -> None:
    database = Database.open(data)
    try:
        with database.transaction() as direct:
            tx = wrap(direct)
            _writes(tx)
            if isinstance(tx, BatchedWrites):
                tx.flush()
    finally:
        database.close()


def test_batched_writes_leave_the_rows_one_row_statements_leave(tmp_path: Path) -> None:
    _load(tmp_path / "plain", lambda tx: tx)
    _load(tmp_path / "batched", BatchedWrites)
    plain, batched = _tables(tmp_path / "plain"), _tables(tmp_path / "batched")
    assert batched == plain
    assert len(plain["lexical_postings"]) == 4
    ended = [row for row in plain["candidates"] if row[0] == SCOPE and row[1] == "c0"]
    assert [row[2] for row in ended] == ["accepted"]


def test_a_batch_writes_one_statement_per_table(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    statements: list[str] = []
    try:
        with database.transaction() as direct:
            tx = BatchedWrites(direct)
            original = Transaction.execute

            def counted(self: Transaction, sql: str, params: Any = ()) -> None:
                statements.append(sql)
                original(self, sql, params)

            Transaction.execute = counted  # type: ignore[method-assign]
            try:
                _writes(tx)
                assert statements == []  # nothing reached DuckDB yet
                tx.flush()
            finally:
                Transaction.execute = original  # type: ignore[method-assign]
    finally:
        database.close()
    # candidates, key_destructions, lexical_documents, lexical_postings
    assert len(statements) == 4


def test_reads_see_every_write_before_them(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    try:
        with database.transaction() as direct:
            tx = BatchedWrites(direct)
            _writes(tx)
            # A waiting candidate is answered from its waiting row, as stored rows would be.
            waiting = memory.get_candidate(tx, SCOPE, "c1")
            other = memory.get_candidate(tx, OTHER, "c1")
            ended = memory.get_candidate(tx, SCOPE, "c0")
            assert waiting is not None
            assert other is not None
            assert ended is not None
            assert (waiting.capture_cursor, other.capture_cursor) == (1, 2)
            assert (ended.state, ended.sealed_body) == ("accepted", None)
            # Any other read flushes first.
            assert key_intents.pending_in_scope(tx, SCOPE, ["c0", "c9"]) == {"c0", "c9"}
            flushed = memory.get_candidate(tx, SCOPE, "c1")
            assert flushed == waiting
    finally:
        database.close()


def _promise_twice(database: Database) -> None:
    with database.transaction() as direct:
        tx = BatchedWrites(direct)
        key_intents.promise(tx, SCOPE, ["c0"], "accept", NOW)
        key_intents.promise(tx, SCOPE, ["c0"], "accept", NOW)
        tx.flush()


def test_a_duplicate_row_fails_the_batch_as_it_would_fail_the_call(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    try:
        with pytest.raises(StoreUnavailable):
            _promise_twice(database)
        with database.reading() as tx:
            assert tx.fetchall("SELECT * FROM key_destructions") == []
    finally:
        database.close()


def _answer_then_flush(database: Database) -> None:
    with database.transaction() as direct:
        tx = BatchedWrites(direct)
        memory.insert_candidate(tx, SCOPE, _candidate("c7", 2), NOW)
        assert memory.get_candidate(tx, SCOPE, "c7") is not None  # from the waiting row
        tx.flush()


def test_an_id_another_scope_holds_fails_the_batch_it_was_answered_in(tmp_path: Path) -> None:
    """The waiting row answered alone; a stored row of the same id in another scope would
    have been part of the answer, so the batch must not commit."""
    database = Database.open(tmp_path)
    try:
        with database.transaction() as tx:
            memory.insert_candidate(tx, OTHER, _candidate("c7", 1), NOW)
        with pytest.raises(StoreUnavailable):
            _answer_then_flush(database)
        with database.reading() as tx:
            assert tx.fetchall("SELECT scope_ref FROM candidates") == [(OTHER,)]
    finally:
        database.close()
