"""The in-process lexical index of every scope, loaded from the store at open and moved by
each committed transaction's index changes (store/index_changes.py).

Search ranks from it only when it is provably in step with the search's own read snapshot:
the index sequence (`IndexCommits`) is taken before the snapshot begins and must be unchanged
once the snapshot read its first row, so no index-changing commit began or ended in between
and the snapshot holds exactly the commits applied here. Otherwise (a commit racing the
snapshot, an unknown commit outcome, changes that do not fit) the search takes the exact
slower path over the store; results never depend on which path ran.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from array import array
from collections.abc import Callable, Sequence

import numpy as np

from engram_memory.search.index_ranking import RankedList, rank_in_index
from engram_memory.search.scope_index import (
    FIELD_SHIFT,
    SLOT_SHIFT,
    IndexInconsistent,
    ScopeIndex,
)
from engram_memory.store.database import Database, Transaction, load_queries
from engram_memory.store.index_changes import (
    DocumentIndexed,
    DocumentPurged,
    IndexChange,
    RecordAdmitted,
    RecordStateSet,
)

log = logging.getLogger("engram_memory.search_index")

_Q = load_queries("engram_memory.store.sql", "search_index.sql")

# How long a search waits for an index-changing commit in flight before taking the slower
# path (a COMMIT with its fsync takes a few milliseconds).
STABLE_WAIT_S = 0.05
# Purged postings kept before a scope's term arrays are rewritten without them.
COMPACT_DEAD_SHARE = 0.5


class SearchIndex:
    """Every scope's `ScopeIndex`, one lock for changes and rankings; an `IndexListener`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scopes: dict[str, ScopeIndex] = {}
        self._usable = False
        self.rankings = 0  # lists ranked here rather than from the store (tests, benchmarks)

    @property
    def usable(self) -> bool:
        return self._usable

    def apply(self, changes: Sequence[IndexChange]) -> None:
        with self._lock:
            if not self._usable:
                return
            try:
                for change in changes:
                    self._apply_one(change)
            except (IndexInconsistent, KeyError, ValueError):
                # Never fail a committed call: search falls back to the store until restart.
                log.error("search index no longer follows the store; searches read the store")
                self._usable = False

    def _apply_one(self, change: IndexChange) -> None:
        scope = self._scopes.setdefault(change.scope_ref, ScopeIndex())
        if isinstance(change, RecordAdmitted):
            scope.admit(
                change.record_id,
                accept_cursor=change.accept_cursor,
                recorded_cursor=change.recorded_cursor,
                valid_t=change.valid_t,
                valid_t_end=change.valid_t_end,
                expires_at_ms=change.expires_at_ms,
            )
        elif isinstance(change, RecordStateSet):
            scope.set_state(change.record_id, change.state)
        elif isinstance(change, DocumentIndexed):
            postings = [triple for batch in change.postings for triple in batch.triples()]
            scope.add_document(change.record_id, change.field_lengths, postings)
        elif isinstance(change, DocumentPurged):
            scope.purge_document(change.record_id)
            if scope.dead_postings > COMPACT_DEAD_SHARE * max(scope.posting_total(), 1):
                scope.compact()

    def invalidate(self) -> None:
        with self._lock:
            if self._usable:
                log.error("a commit's outcome is unknown; searches read the store until restart")
            self._usable = False

    def rank(
        self,
        scope_ref: str,
        terms: Sequence[str],
        *,
        in_step: Callable[[], bool],
        system_as_of: int,
        valid_as_of: int,
        now_ms: int,
    ) -> RankedList | None:
        """The ranked list from the index, or None when it cannot be trusted for this
        snapshot (`in_step` false under the lock, or the index stopped following)."""
        with self._lock:
            if not self._usable or not in_step():
                return None
            scope = self._scopes.get(scope_ref) or ScopeIndex()
            self.rankings += 1
            return rank_in_index(
                scope,
                terms,
                system_as_of=system_as_of,
                valid_as_of=valid_as_of,
                now_ms=now_ms,
            )

    def rows(self) -> dict[str, list[tuple[object, ...]]]:
        """Every scope's `ScopeIndex.rows()` (a diagnostic for tests and checks)."""
        with self._lock:
            return {scope_ref: scope.rows() for scope_ref, scope in sorted(self._scopes.items())}

    def load(self, tx: Transaction) -> None:
        """Rebuild every scope from the store as `tx` sees it (at open, before serving)."""
        with self._lock:
            self._scopes = _load_scopes(tx)
            self._usable = True


def follow_store(database: Database) -> SearchIndex:
    """A `SearchIndex` loaded from `database` and following its commits from now on.

    Raises:
        StoreUnavailable / StoreCorrupt: the store could not be read (nothing follows).
    """
    index = SearchIndex()
    started = time.monotonic()
    while True:
        sequence = database.index_commits.stable_sequence(STABLE_WAIT_S)
        database.index_commits.follow(index)
        with database.reading() as tx:
            index.load(tx)
        if sequence is not None and database.index_commits.sequence() == sequence:
            break
        database.index_commits.follow(None)  # a commit raced the load: load again
    records = sum(len(scope.record_ids) for scope in index._scopes.values())
    log.info(
        "search index loaded: %d scope(s), %d record(s) in %.1f s",
        len(index._scopes),
        records,
        time.monotonic() - started,
    )
    return index


def _load_scopes(tx: Transaction) -> dict[str, ScopeIndex]:
    scopes: dict[str, ScopeIndex] = {}
    for row in tx.fetchall(_Q["indexed_records"]):
        scope_ref, record_id, state = str(row[0]), str(row[1]), str(row[2])
        scope = scopes.setdefault(scope_ref, ScopeIndex())
        scope.admit(
            record_id,
            accept_cursor=int(row[3]),
            recorded_cursor=int(row[4]),
            valid_t=int(row[5]),
            valid_t_end=None if row[6] is None else int(row[6]),
            expires_at_ms=None if row[7] is None else int(row[7]),
        )
        scope.set_state(record_id, state)
        scope.add_document(record_id, json.loads(str(row[8])), [])
    _load_postings(tx, scopes)
    return scopes


def _load_postings(tx: Transaction, scopes: dict[str, ScopeIndex]) -> None:
    """Every posting, grouped by scope and term in one ordered read: (slot, field, tf) come
    packed from the store, so nothing is parsed row by row."""
    for scope_ref, scope in scopes.items():
        rows = tx.fetchall(_Q["packed_postings"], [scope_ref, SLOT_SHIFT, FIELD_SHIFT])
        slots = [np.zeros(0, dtype=np.int64)]
        for term, packed in rows:
            column = array("q", packed)
            scope.postings[str(term)] = column
            slots.append(np.array(column, dtype=np.int64) >> SLOT_SHIFT)
        counts = np.bincount(np.concatenate(slots), minlength=len(scope.record_ids))
        scope.set_posting_counts(counts.tolist())
