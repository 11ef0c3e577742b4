"""Loading the search index while the server already serves (issue 20 item 8).

At 100k records the lexical index and the kept vectors take ~5 CPU-s to read and build,
which a start used to wait for. `serve` now answers calls at once and builds the index in a
thread of its own:

- the index is built from one read snapshot, beside the index searches use, which stays
  unusable meanwhile: a search waits for the load (core/search_index.py), a lexical one up
  to LOAD_WAIT_S, then it takes the exact store path (tools/search_paths.py: the same list,
  more slowly), a semantic one up to EMBED_WAIT_S, then RANKING_UNAVAILABLE (retriable);
- commits keep running. Their index changes are held by `_HeldChanges`, each tagged with
  the commit's index sequence (odd while it commits: store/index_changes.py's IndexCommits),
  and handed over with the built index: those of commits that ended after the snapshot
  began are applied, in commit order, before the index serves a search; from then on the
  changes go straight to the index.

Which commits a snapshot holds is known exactly: the sequence is taken once no commit is in
flight and is unchanged after the snapshot's first read, so the snapshot holds every commit
whose sequence is below it and none above (else the read begins again).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from engram_memory.contract.exceptions import (
    IndexInconsistent,
    StoreCorrupt,
    StoreUnavailable,
)
from engram_memory.core.index_keeping import Built, opened_index, sealed_index
from engram_memory.core.index_reading import index_fingerprint, indexed_scopes
from engram_memory.core.kept_vectors import VectorKeeping
from engram_memory.core.search_index import STABLE_WAIT_S, SearchIndex, SemanticSetup
from engram_memory.store import kept_index
from engram_memory.store.database import Database
from engram_memory.store.index_changes import IndexChange, IndexCommits
from engram_memory.store.transaction import Transaction

log = logging.getLogger("engram_memory.search_index")

# How long closing waits for a load in flight (its reads cannot be interrupted).
_STOP_WAIT_S = 60.0


class _HeldChanges:
    """The index listener while a load runs: holds each commit's changes with its sequence,
    then forwards to the index once `hand_over` installed it."""

    def __init__(self, commits: IndexCommits) -> None:
        self._commits = commits
        self._lock = threading.Lock()
        self._held: list[tuple[int, Sequence[IndexChange]]] = []
        self._invalidated = False
        self._index: SearchIndex | None = None

    def apply(self, changes: Sequence[IndexChange]) -> None:
        with self._lock:
            if self._index is not None:
                self._index.apply(changes)
            else:  # called while the commit's sequence is odd: it names this commit
                self._held.append((self._commits.sequence(), changes))

    def invalidate(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.invalidate()
            else:
                self._invalidated = True

    def hand_over(self, index: SearchIndex, built: Built, snapshot_sequence: int) -> None:
        """Install `built` with the held changes of commits after the snapshot; forward
        every later change (under one lock: no commit falls between the two)."""
        with self._lock:
            later = [changes for sequence, changes in self._held if sequence > snapshot_sequence]
            index.install(*built, later)
            if self._invalidated:
                index.invalidate()
            self._held.clear()
            self._index = index


class BackgroundIndexLoad:
    """Builds `index` from `database` in a thread while the store is served; `loaded` runs
    once the load ended (installed or failed), e.g. to bound DuckDB's cache after it."""

    def __init__(
        self,
        database: Database,
        index: SearchIndex,
        loaded: Callable[[], None],
        kept_key: bytes | None = None,
    ) -> None:
        self._database, self._index, self._loaded = database, index, loaded
        # The index the last clean stop kept (core/index_keeping.py), taken at open.
        self._kept, database.kept_index = database.kept_index, None
        self._kept_key = kept_key
        self._held = _HeldChanges(database.index_commits)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Follow the store's commits from now on, then load (call before serving)."""
        self._index.begin_loading()
        self._database.index_commits.follow(self._held)
        self._thread = threading.Thread(target=self._run, name="engram-index-load", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Wait for the load to end (closing the store under it would fail its reads)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(_STOP_WAIT_S)
            if self._thread.is_alive():
                log.error("search index load still running at close")

    def following(self) -> bool:
        """True while the index still follows every commit (an import detaches it: what it
        writes never reaches the index, which must then not be kept)."""
        return self._database.index_commits.followed_by(self._held)

    def _run(self) -> None:
        started = time.monotonic()
        try:
            read = self._read()
            if read is None:  # closing before the snapshot began
                self._index.load_failed()
                return
            built, sequence = read
            self._held.hand_over(self._index, built, sequence)
        except Exception:  # noqa: BLE001 - any failure: the store path serves, nothing else
            # Searches keep the exact store path; a damaged block is also the integrity
            # scan's to report (core/integrity_scan.py). No exception text: it may quote data.
            log.error("search index not loaded; searches read the store until restart")
            self._index.load_failed()
            return
        finally:
            self._loaded()
        self._index.start_embedding()
        scopes, records = self._index.size()
        log.info(
            "search index loaded while serving: %d scope(s), %d record(s) in %.1f s",
            scopes,
            records,
            time.monotonic() - started,
        )

    def _read(self) -> tuple[Built, int] | None:
        """The index built from one snapshot and the index sequence it holds exactly."""
        commits = self._database.index_commits
        while not self._stopping.is_set():
            sequence = commits.stable_sequence(STABLE_WAIT_S)
            if sequence is None:
                continue  # commits in flight all along: wait on
            with self._database.reading(audit_complete=False) as tx:
                scope_refs = indexed_scopes(tx)  # the snapshot began here
                if commits.sequence() != sequence:
                    continue  # a commit began or ended around it: begin again
                built = self._kept_built(tx)
                return built or self._index.read(tx, scope_refs), sequence
        return None

    def _kept_built(self, tx: Transaction) -> Built | None:
        """The kept index when there is one and it is bound to the store `tx` sees."""
        kept, self._kept = self._kept, None
        if kept is None or self._kept_key is None:
            return None
        # DuckDB computes the store's fingerprint (~0.3 s at 100k records, without the GIL)
        # while this thread opens and builds the kept index.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="engram-fingerprint") as pool:
            counted = pool.submit(index_fingerprint, tx)
            built = opened_index(kept, self._kept_key, self._index.model, counted.result)
        if built is None:
            log.warning(
                "kept search index does not match the store (changed since, or damaged); "
                "loading it from the store"
            )
        return built


def keep_at_stop(database: Database, index: SearchIndex, key: bytes) -> None:
    """Keep `index` for the next start (core/index_keeping.py), at a clean stop once nothing
    writes any more; only an index in step with the store is kept, and any failure just
    leaves the next start to load from the store (one log line)."""
    commits = database.index_commits
    started = time.monotonic()
    try:
        database.project()  # what a close would write, written first: the index follows it
        database.settle_deferred()
        sequence = commits.stable_sequence(STABLE_WAIT_S)
        if sequence is None:
            raise IndexInconsistent("a commit is still in flight")
        with database.reading(audit_complete=False) as tx:
            fingerprint = index_fingerprint(tx)
        sealed = index.export(
            lambda: commits.sequence() == sequence,
            lambda scopes, semantic: sealed_index(scopes, semantic, key, fingerprint, index.model),
        )
        if sealed is None:
            raise IndexInconsistent("the index does not follow the store")
        kept_index.keep(database.path.parent, sealed)
    except (StoreUnavailable, StoreCorrupt, IndexInconsistent, OSError, MemoryError):
        log.warning("search index not kept; the next start loads it from the store")
        return
    log.info(
        "search index kept for the next start: %d bytes in %.1f s",
        len(sealed),
        time.monotonic() - started,
    )


def follow_store(database: Database, semantic: SemanticSetup | None = None) -> SearchIndex:
    """A `SearchIndex` loaded from `database` and following its commits from now on, with
    the semantic projections when `semantic` is given.

    Raises:
        StoreUnavailable / StoreCorrupt: the store could not be read (nothing follows).
    """
    index = SearchIndex(None if semantic is None else semantic_keeping(database, semantic))
    started = time.monotonic()
    while True:
        sequence = database.index_commits.stable_sequence(STABLE_WAIT_S)
        database.index_commits.follow(index)
        with database.reading(audit_complete=False) as tx:
            index.load(tx)
        if sequence is not None and database.index_commits.sequence() == sequence:
            break
        database.index_commits.follow(None)  # a commit raced the load: load again
    index.start_embedding()
    scopes, records = index.size()
    log.info(
        "search index loaded: %d scope(s), %d record(s) in %.1f s",
        scopes,
        records,
        time.monotonic() - started,
    )
    return index


def semantic_keeping(database: Database, semantic: SemanticSetup) -> VectorKeeping:
    """The kept vectors of `database` for the projections `semantic` sets up."""
    return VectorKeeping(
        database, semantic.model, semantic.open_body, semantic.scope_key, semantic.vector_key
    )
