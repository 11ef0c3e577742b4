"""A mutation's writes recorded as rows for the call log, instead of run as statements.

A `capture` commits by appending one call-log record (store/logged_calls.py
`logged_mutation`). Its code is the same as in a DuckDB transaction: the tool's `write`
runs against a `RecordingTransaction`, which keeps the parameters of each INSERT it is given
as a row of that INSERT's table, keeps the prepared audit entries (`insert_audit`), and moves
the chain heads exactly as a transaction does. The record then holds those rows as values:
the journal event with its hash, the candidate with its sealed body, the idempotency result,
the audit entry with its chain hash and receipts. The projection (store/projection.py)
inserts them with one statement per table, so a replay writes exactly what was acknowledged
and never recomputes a hash.

Only the INSERTs in `RECORDED` may be recorded: anything else (an UPDATE, a statement a
later tool adds) is refused as a programming error, because its effect could not be
replayed from the rows alone. Reads go to a fresh read snapshot of the file (the call's own
pending rows are published in memory: `Transaction.pending_row`, heads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from engram_memory.contract.exceptions import StoreUnavailable
from engram_memory.store import journal, memory
from engram_memory.store.audit import AuditBatch
from engram_memory.store.heads import ChainHeads
from engram_memory.store.transaction import Owner, Transaction

# The statements a recording transaction accepts, by the table whose rows they insert. The
# projection writes each table with its own multi-row statement of the same meaning
# (store/sql/projection.sql: `insert_<table>`).
RECORDED: dict[str, str] = {
    journal.INSERT_SQL: "journal_events",
    memory.INSERT_CANDIDATE_SQL: "candidates",
    memory.PUT_IDEMPOTENCY_SQL: "idempotency",
}
TABLES = tuple(RECORDED.values())
# Columns holding bytes (JSON carries them as base64): the candidate's sealed body.
BYTES_COLUMNS: dict[str, int] = {"candidates": 8}

Snapshot = Callable[[], AbstractContextManager[Transaction]]


class RecordingTransaction(Transaction):
    """A write transaction that records its rows (see the module docstring)."""

    def __init__(
        self, owner: Owner, heads: ChainHeads, generation: int, snapshot: Snapshot
    ) -> None:
        connection: Any = None  # never used: every statement is recorded or read elsewhere
        super().__init__(owner, connection, heads, generation)
        self._snapshot = snapshot
        self.tables: dict[str, list[list[Any]]] = {}
        self.audit: AuditBatch | None = None

    def recorded(self) -> bool:
        """True once anything was recorded (a replay found under the lock records nothing)."""
        return self.audit is not None or bool(self.tables)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        table = RECORDED.get(sql)
        if table is None:
            raise StoreUnavailable("statement cannot be recorded for the call log")
        self.wrote = True
        self.tables.setdefault(table, []).append(list(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        for row in rows:
            self.execute(sql, row)

    def insert_audit(self, batch: AuditBatch) -> None:
        self.wrote = True
        if self.audit is None:
            self.audit = batch
        else:
            self.audit.extend(batch)

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._snapshot() as snapshot:
            return snapshot.fetchall(sql, params)

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        with self._snapshot() as snapshot:
            return snapshot.fetchone(sql, params)

    def fetch_columns(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any]:
        raise StoreUnavailable("bulk reads are not for a recorded mutation")

    def count_rows(self, sql: str, batch: int = 4096) -> int:
        raise StoreUnavailable("bulk reads are not for a recorded mutation")
