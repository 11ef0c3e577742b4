"""One open DuckDB transaction: statement helpers, and the chain heads as it sees them.

Driver errors are mapped by the owning `Database` (`driver_failure`), the one boundary where
DuckDB text stops. A read snapshot (`Database.reading()`) gets a transaction that refuses to
write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import duckdb

from engram_memory.contract.exceptions import StoreUnavailable
from engram_memory.store.heads import ChainHeads, Head
from engram_memory.store.index_changes import IndexChange


class Owner(Protocol):
    """What a transaction needs of the store that opened it (`Database` is the one)."""

    def driver_failure(self, exc: duckdb.Error | OSError, what: str) -> StoreUnavailable:
        """The exception to raise for a driver failure (a damaged file stops the store)."""
        ...

    def written_since(self, key: str, generation: int) -> bool:
        """False only if `key` was certainly not committed after `generation`."""
        ...


class Transaction:
    """Statement helpers bound to the open transaction; driver errors are mapped by the store.

    It also carries the chain heads as this transaction sees them: the committed ones plus
    what it appended (journal.append / audit.append report their new heads here).
    """

    def __init__(
        self,
        database: Owner,
        connection: duckdb.DuckDBPyConnection,
        heads: ChainHeads,
        generation: int,
        *,
        writable: bool = True,
        before_first_write: Callable[[Transaction], None] | None = None,
    ) -> None:
        self._database = database
        self._connection = connection
        self._writable = writable
        self._committed_heads = heads
        # What was published when this transaction began (store/published.py).
        self.generation = generation
        self._audit_head: Head | None = None
        self._journal_heads: dict[str, Head] = {}
        self._written_keys: list[str] = []
        self._index_changes: list[IndexChange] = []
        self._before_first_write = before_first_write
        # Statements go through execute/executemany; fetch* only read.
        self.wrote = False

    def audit_head(self) -> Head:
        """(sequence, entry hash) of the last audit entry, this transaction's included."""
        return self._committed_heads.audit if self._audit_head is None else self._audit_head

    def journal_head(self, scope_ref: str) -> Head:
        """(cursor, event hash) of the scope's last event, this transaction's included."""
        pending = self._journal_heads.get(scope_ref)
        return self._committed_heads.journal_head(scope_ref) if pending is None else pending

    def moved_audit_head(self, head: Head) -> None:
        self._audit_head = head

    def moved_journal_head(self, scope_ref: str, head: Head) -> None:
        self._journal_heads[scope_ref] = head

    def moved_heads(self) -> tuple[Head | None, dict[str, Head]]:
        return self._audit_head, dict(self._journal_heads)

    def wrote_key(self, key: str) -> None:
        """Note a key this transaction wrote, published with its commit (`written_since`)."""
        self._written_keys.append(key)

    def written_keys(self) -> list[str]:
        return list(self._written_keys)

    def note_index_change(self, change: IndexChange) -> None:
        """Note a change a search index must follow, handed over once this commits
        (store/index_changes.py)."""
        self._index_changes.append(change)

    def index_changes(self) -> list[IndexChange]:
        return list(self._index_changes)

    def written_since(self, key: str, generation: int) -> bool:
        """True unless `key` was certainly not committed after a snapshot of `generation`
        (store/published.py): a write transaction then need not read it again."""
        return self._database.written_since(key, generation)

    def _will_write(self) -> None:
        if not self._writable:
            # A programming error, never an outcome: a snapshot must not write.
            raise StoreUnavailable("write attempted in a read snapshot")
        if not self.wrote:
            self.wrote = True
            first, self._before_first_write = self._before_first_write, None
            if first is not None:
                first(self)

    def start_writing(self) -> None:
        """Begin writing without a statement of one's own (runs what precedes a first write).

        Raises:
            StoreUnavailable: a read snapshot, or what runs before the first write failed.
        """
        self._will_write()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._will_write()
        try:
            self._connection.execute(sql, list(params))
        except duckdb.Error as exc:
            raise self._database.driver_failure(exc, "statement failed") from exc

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        self._will_write()
        try:
            self._connection.executemany(sql, [list(row) for row in rows])
        except duckdb.Error as exc:
            raise self._database.driver_failure(exc, "statement failed") from exc

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._connection.execute(sql, list(params)).fetchall()
        except duckdb.Error as exc:
            raise self._database.driver_failure(exc, "query failed") from exc

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        try:
            return self._connection.execute(sql, list(params)).fetchone()
        except duckdb.Error as exc:
            raise self._database.driver_failure(exc, "query failed") from exc

    def fetch_columns(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any]:
        """The result as numpy arrays by column name (bulk reads: no Python object per row).

        Raises:
            StoreCorrupt / StoreUnavailable: as for every statement.
        """
        try:
            columns: dict[str, Any] = self._connection.execute(sql, list(params)).fetchnumpy()
        except duckdb.Error as exc:
            raise self._database.driver_failure(exc, "query failed") from exc
        return columns

    def count_rows(self, sql: str, batch: int = 4096) -> int:
        """Run a query and read every row of its result in batches; return how many.

        Raises:
            StoreCorrupt / StoreUnavailable: as for every statement.
        """
        rows = 0
        try:
            result = self._connection.execute(sql)
            while chunk := result.fetchmany(batch):
                rows += len(chunk)
        except duckdb.Error as exc:
            raise self._database.driver_failure(exc, "query failed") from exc
        return rows
