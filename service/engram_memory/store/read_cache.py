"""The rows a read needs, in memory: `get` and a search page run no DuckDB statement on a hit.

The cache holds `accepted_current` record rows (sealed bodies: ciphertext only; the item keys
that open them are cached apart, in the key store, and destroyed with their files), keyed by
(scope_ref, record_id): a scope names its tenant and workspace, so a lookup can only ever
find a row of the caller's own scope. It is bounded by the bytes of the rows it holds
(least recently used rows go first).

It is exact, never merely fresh: every change to a record reaches it through one seam,
before the call that made the change is answered:

- `publish(scope_ref, row)`: a record row as it now stands (an admission inserting it);
- `evict(scope_ref, record_id)`: any other change (withdrawn, forgotten, superseded...);
- `clear()`: a commit whose outcome is unknown (nothing cached is trusted any more).

Today the seam is driven by the writer: `Database` hands each committed transaction's
changes to `apply` after its COMMIT and before the chain heads are published and the call
returns (store/index_changes.py). When mutations commit through the call log, the append
will call `publish`/`evict` with the rows it makes visible, at append time, the same way.

A miss is read from a DuckDB snapshot and may be kept (`fill`), but only if no change
reached the cache since before that snapshot began (`version`): a row read in an older
snapshot never overwrites what a later commit published or evicted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from engram_memory.store.index_changes import (
    DocumentPurged,
    IndexChange,
    RecordRow,
    RecordStateSet,
    RecordWritten,
)

# 64 MiB of rows by default (ENGRAM_READ_CACHE_MIB): ~30k records of 2 KiB.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# What a row costs beyond its sealed body (ids, digests, the row object, the dict slot).
ROW_OVERHEAD_BYTES = 600

_Key = tuple[str, str]


def row_cost(row: RecordRow) -> int:
    return ROW_OVERHEAD_BYTES + (0 if row.sealed_body is None else len(row.sealed_body))


class RecordCache:
    """Eligible-by-state record rows by (scope_ref, record_id), LRU, bounded by bytes."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._lock = threading.Lock()
        self._rows: OrderedDict[_Key, RecordRow] = OrderedDict()
        self._bytes = 0
        self._max_bytes = max(0, max_bytes)
        # Moved by every publish, evict and clear (see `fill`).
        self._version = 0
        self.hits = 0
        self.misses = 0

    # -- reads ------------------------------------------------------------------------------

    def lookup(self, scope_ref: str, record_id: str) -> RecordRow | None:
        """The row of `record_id` in `scope_ref` if cached (it is then the committed row)."""
        key = (scope_ref, record_id)
        with self._lock:
            row = self._rows.get(key)
            if row is None:
                self.misses += 1
                return None
            self._rows.move_to_end(key)
            self.hits += 1
            return row

    def version(self) -> int:
        """Take it before a snapshot begins; pass it to `fill` with what the snapshot read."""
        with self._lock:
            return self._version

    def fill(self, scope_ref: str, row: RecordRow, version: int) -> None:
        """Keep `row`, read in a snapshot begun after `version` was taken, unless a change
        reached the cache since (the snapshot may then be older than what it holds)."""
        if row.state != "accepted_current" or row.sealed_body is None:
            return
        with self._lock:
            if self._version == version:
                self._put((scope_ref, row.record_id), row)

    # -- the seam every write goes through ------------------------------------------------

    def publish(self, scope_ref: str, row: RecordRow) -> None:
        """`row` is now the record's committed row (kept only while eligible by state)."""
        with self._lock:
            self._version += 1
            self._drop((scope_ref, row.record_id))
            if row.state == "accepted_current" and row.sealed_body is not None:
                self._put((scope_ref, row.record_id), row)

    def evict(self, scope_ref: str, record_id: str) -> None:
        """The record changed: its row must be read again (and is gone from memory)."""
        with self._lock:
            self._version += 1
            self._drop((scope_ref, record_id))

    def clear(self) -> None:
        with self._lock:
            self._version += 1
            self._rows.clear()
            self._bytes = 0

    def apply(self, changes: Sequence[IndexChange]) -> None:
        """One committed transaction's changes: a written row is published; a state change
        or a purged document (a forget) evicts the record. The rest (the index document,
        postings, texts to embed) accompanies a row's insert and changes no row."""
        for change in changes:
            if isinstance(change, RecordWritten):
                self.publish(change.scope_ref, change.row)
            elif isinstance(change, RecordStateSet | DocumentPurged):
                self.evict(change.scope_ref, change.record_id)

    # -- bounds ---------------------------------------------------------------------------

    def resize(self, max_bytes: int) -> None:
        """A new bound (0 turns the cache off); the rows over it go now."""
        with self._lock:
            self._max_bytes = max(0, max_bytes)
            self._shrink()

    def holds(self, scope_ref: str, record_id: str) -> bool:
        """Whether the row is held (tests check what a forget left in memory)."""
        with self._lock:
            return (scope_ref, record_id) in self._rows

    def size(self) -> tuple[int, int]:
        """(rows, bytes) held."""
        with self._lock:
            return len(self._rows), self._bytes

    def _put(self, key: _Key, row: RecordRow) -> None:
        cost = row_cost(row)
        if cost > self._max_bytes // 4:
            return  # one huge record would push out a quarter of the rest
        self._drop(key)
        self._rows[key] = row
        self._bytes += cost
        self._shrink()

    def _drop(self, key: _Key) -> None:
        row = self._rows.pop(key, None)
        if row is not None:
            self._bytes -= row_cost(row)

    def _shrink(self) -> None:
        while self._rows and self._bytes > self._max_bytes:
            _, row = self._rows.popitem(last=False)
            self._bytes -= row_cost(row)
