"""Writes that do not take the writer's lock: a transaction on a cursor of its own.

DuckDB runs transactions of separate cursors of one database concurrently (optimistic
concurrency: appends never conflict, and rows nobody else touches cannot either), so work
that only adds rows no reader can see yet need not hold the single writer. The one user is
the staged index of an admission (core/indexing.py): a ~1 MiB record's tens of thousands of
postings are written and committed here before the accept transaction, whose record row is
what makes them visible (every search joins `records`), so the writer's critical section
stays short for every other call.

A side write never moves a chain head, never runs the writer's deferred tidying and is not
counted as a commit of the calling thread (`Database.commits_on_this_thread` tells whether
a call's own mutation committed). Driver errors are mapped by `Database.driver_failure`: a
damaged file stops the store, and a stopped store refuses the write. Its cursor comes from
the reader pool, so compaction and close wait for it like for a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress

import duckdb

from engram_memory.store import memory
from engram_memory.store.connection import load_queries
from engram_memory.store.heads import ChainHeads
from engram_memory.store.readers import ReaderPool
from engram_memory.store.transaction import Owner, Transaction

_Q = load_queries("engram_memory.store.sql", "side_writes.sql")


@contextmanager
def side_transaction(
    database: Owner, pool: ReaderPool, heads: ChainHeads, generation: int
) -> Iterator[Transaction]:
    """The body of `Database.side_write`: commits on exit, rolls back on any exception.

    Raises:
        StoreCorrupt: the file is damaged (the store is stopped).
        StoreUnavailable: begin, a statement or COMMIT failed (a conflict included); the
            rows are then either all there or none, and the caller's record is not.
        ValueError: the block moved a chain head or wrote a published key (a programming
            error; rolled back).
    """
    try:
        cursor = pool.acquire()
    except duckdb.Error as exc:
        raise database.driver_failure(exc, "cannot open a side cursor") from exc
    try:
        try:
            cursor.execute("BEGIN TRANSACTION")
        except duckdb.Error as exc:
            raise database.driver_failure(exc, "begin failed") from exc
        tx = Transaction(database, cursor, heads, generation)
        try:
            yield tx
            audit_head, journal_heads = tx.moved_heads()
            if audit_head is not None or journal_heads or tx.written_keys():
                # Nothing is published by a side commit (store/published.py).
                raise ValueError("a side write must not move a chain head or write a key")
        except BaseException:
            with suppress(duckdb.Error):
                cursor.execute("ROLLBACK")
            raise
        try:
            cursor.execute("COMMIT")
        except duckdb.Error as exc:
            raise database.driver_failure(exc, "side commit failed") from exc
    finally:
        pool.release(cursor)


def remove_staged(tx: Transaction, scope_ref: str, record_id: str) -> bool:
    """Delete the index rows of `record_id` if its record row does not exist; True if any.

    Only the call holding the record's claim (or start-up) may call this: the check and the
    delete are not atomic against a concurrent accept of the same record.
    """
    row = tx.fetchone(_Q["staged_document"], [scope_ref, record_id])
    if not row or not row[0]:
        return False
    memory.purge_document(tx, scope_ref, record_id)
    return True


def sweep_orphan_index(tx: Transaction) -> int:
    """At start-up (no call in flight): delete index rows of records that do not exist.

    Cheap when there is nothing to do: one pass over the documents (a row per record); the
    postings are scanned only when an orphan document exists (they are always staged and
    removed together with their document). Returns the number of orphan documents.
    """
    row = tx.fetchone(_Q["orphan_documents"])
    orphans = int(row[0]) if row else 0
    if orphans:
        tx.execute(_Q["delete_orphan_postings"])
        tx.execute(_Q["delete_orphan_documents"])
    return orphans
