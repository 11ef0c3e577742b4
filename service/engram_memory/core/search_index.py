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

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from engram_memory.contract.exceptions import IndexInconsistent
from engram_memory.core.index_reading import indexed_scopes, load_scopes
from engram_memory.core.kept_vectors import VectorKeeping
from engram_memory.core.semantic_index import BodyOpener, SemanticProjection
from engram_memory.search.embedding import EmbeddingModel, Vectors
from engram_memory.search.index_ranking import RankedList, rank_in_index
from engram_memory.search.scope_index import ScopeIndex
from engram_memory.search.semantic_scope import rank_with_projections
from engram_memory.store.index_changes import (
    DocumentIndexed,
    DocumentPurged,
    IndexChange,
    RecordAdmitted,
    RecordEmbedded,
    RecordStateSet,
)
from engram_memory.store.transaction import Transaction

log = logging.getLogger("engram_memory.search_index")

T = TypeVar("T")

# How long a search waits for an index-changing commit in flight before taking the slower
# path (a COMMIT with its fsync takes a few milliseconds).
STABLE_WAIT_S = 0.05
# Purged postings kept before a scope's term arrays are rewritten without them.
COMPACT_DEAD_SHARE = 0.5
# How long a semantic search waits for the embedder to reach its snapshot before answering
# RANKING_UNAVAILABLE (retriable): a 512-record batch embeds in well under a second.
EMBED_WAIT_S = 10.0
# How long a lexical search waits for the index loading beside serving before it takes the
# store path (core/index_loading.py).
LOAD_WAIT_S = 10.0


@dataclass(frozen=True)
class SemanticSetup:
    """What the semantic projections need to follow the store: the model, a way to open a
    sealed body (to embed a record with no kept vector), each scope's index key (citations
    are keyed) and vector key (kept vectors are sealed, core/kept_vectors.py)."""

    model: EmbeddingModel
    open_body: BodyOpener
    scope_key: Callable[[str], bytes]
    vector_key: Callable[[str], bytes]


@dataclass(frozen=True)
class SemanticList:
    """A semantic_v1 ranked list, with what its receipt says of the projections."""

    record_ids: list[str]
    scores: list[float]
    eligible_count: int
    vector_count: int
    edge_count: int
    model_ref: str


class SearchIndex:
    """Every scope's `ScopeIndex` (and semantic projections when configured), one lock for
    changes and rankings; an `IndexListener`."""

    def __init__(self, keeping: VectorKeeping | None = None) -> None:
        self._lock = threading.Lock()
        # Notified each time the embedder stores a batch or stops (a search may be waiting).
        self._embedded = threading.Condition(self._lock)
        self._embedder: threading.Thread | None = None
        self._embedder_failed = False
        self._embedding_stopped = False  # the store is closing: no batch is started any more
        self._scopes: dict[str, ScopeIndex] = {}
        self._usable = False
        self.rankings = 0  # lists ranked here rather than from the store (tests, benchmarks)
        self._keeping = keeping
        self.semantic: SemanticProjection | None = None
        # Cleared while the index loads beside a serving store (core/index_loading.py): a
        # semantic search waits for it, a lexical one takes the store path meanwhile.
        self._load_done = threading.Event()
        self._load_done.set()

    def size(self) -> tuple[int, int]:
        """(scopes, records) held, for the load log line."""
        with self._lock:
            return len(self._scopes), sum(len(s.record_ids) for s in self._scopes.values())

    def apply(self, changes: Sequence[IndexChange]) -> None:
        with self._lock:
            self._apply_locked(changes)

    def _apply_locked(self, changes: Sequence[IndexChange]) -> None:
        if not self._usable:
            return
        try:
            for change in changes:
                self._apply_one(change)
        except (IndexInconsistent, KeyError, ValueError):
            # Never fail a committed call: search falls back to the store until restart.
            log.error("search index no longer follows the store; searches read the store")
            self._usable = False
        self._start_embedder()

    def _start_embedder(self) -> None:
        """Start the embedder thread when texts are queued and none runs (under the lock)."""
        if (
            self.semantic is None
            or not self.semantic.queued
            or self._embedder is not None
            or self._embedding_stopped
        ):
            return
        self._embedder = threading.Thread(
            target=self._embed_queued, name="engram-semantic-embedder", daemon=True
        )
        self._embedder.start()

    def _embed_queued(self) -> None:
        """Embed the queued records a batch at a time without the lock (writers and lexical
        searches go on meanwhile), store each batch under it and keep it in the store; stop
        when the queue is empty."""
        while True:
            with self._lock:
                semantic, keeping = self.semantic, self._keeping
                if (
                    semantic is None
                    or keeping is None
                    or not semantic.queued
                    or self._embedder_failed
                    or self._embedding_stopped
                ):
                    self._embedder = None
                    self._embedded.notify_all()
                    return
                batch = semantic.next_batch()
            try:
                prepared = keeping.prepare(batch)
                vectors = semantic.model.embed([ready[0] for ready in prepared if ready])
            except Exception:  # noqa: BLE001 - the tokenizer's or store's errors; fail closed
                with self._lock:
                    log.error("semantic embedding failed; semantic searches are unavailable")
                    self._embedder_failed = True
                    self._embedder = None
                    self._embedded.notify_all()
                return
            with self._lock:
                taken = (
                    semantic.store(batch, prepared, vectors) if self.semantic is semantic else []
                )
                self._embedded.notify_all()
            keeping.keep(taken)

    def _wait_for_embedder(self, scope_ref: str, in_step: Callable[[], bool]) -> bool:
        """Wait (releasing the lock) until `scope_ref` has no queued text; False when the
        snapshot moved on meanwhile, the embedder failed or took longer than EMBED_WAIT_S."""
        deadline = time.monotonic() + EMBED_WAIT_S
        while self.semantic is not None and self.semantic.has_queued(scope_ref):
            self._start_embedder()
            remaining = deadline - time.monotonic()
            if self._embedder_failed or remaining <= 0:
                return False
            self._embedded.wait(remaining)
            if not self._usable or not in_step():
                return False
        return not self._embedder_failed

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
        elif isinstance(change, RecordEmbedded):
            if self.semantic is not None:
                self.semantic.embedded(change, scope.slot_of(change.record_id))
        elif isinstance(change, DocumentPurged):
            scope.purge_document(change.record_id)
            slot = scope.known_slot(change.record_id)
            if self.semantic is not None and slot is not None:
                self.semantic.purged(change.scope_ref, slot)
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
        snapshot (`in_step` false under the lock, or the index stopped following). While the
        index loads it waits up to LOAD_WAIT_S for the load: from a kept index that takes a
        second or two at 100k records, and the store path costs about as much a search."""
        self._load_done.wait(LOAD_WAIT_S)
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

    def rank_semantic(
        self,
        scope_ref: str,
        terms: Sequence[str],
        query_vector: Vectors,
        *,
        in_step: Callable[[], bool],
        system_as_of: int,
        valid_as_of: int,
        now_ms: int,
    ) -> SemanticList | None:
        """The semantic_v1 list, or None when the projections cannot be trusted for this
        snapshot (none configured, `in_step` false, or the index stopped following): there is
        no slower path, vectors exist only here: while the index loads, it waits up to
        EMBED_WAIT_S for the load."""
        if not self._load_done.wait(EMBED_WAIT_S):
            return None
        with self._lock:
            if self.semantic is None or not self._usable or not in_step():
                return None
            if not self._wait_for_embedder(scope_ref, in_step):
                return None
            lexical = self._scopes.get(scope_ref) or ScopeIndex()
            semantic = self.semantic.scope(scope_ref)
            ranked = rank_with_projections(
                lexical,
                semantic,
                terms,
                query_vector,
                system_as_of=system_as_of,
                valid_as_of=valid_as_of,
                now_ms=now_ms,
            )
            self.rankings += 1
            return SemanticList(
                ranked.record_ids,
                ranked.scores,
                ranked.eligible_count,
                semantic.vector_count(),
                ranked.edge_count,
                self.semantic.model.model_ref,
            )

    def semantic_rows(self) -> dict[str, tuple[list[Any], list[Any]]]:
        """Every scope's (vectors by record id, edges by record ids) once every queued text is
        embedded: a diagnostic for tests."""
        if not self._load_done.wait(EMBED_WAIT_S):
            raise IndexInconsistent("the search index did not finish loading")
        with self._lock:
            if self.semantic is None:
                return {}
            for scope_ref in {scope for scope, _ in self.semantic.queued}:
                if not self._wait_for_embedder(scope_ref, lambda: True):
                    raise IndexInconsistent("the semantic embedder did not finish")
            result: dict[str, tuple[list[Any], list[Any]]] = {}
            for scope_ref, semantic in sorted(self.semantic.scopes.items()):
                ids = self._scopes[scope_ref].record_ids
                vectors = sorted((ids[s], v) for s, v in semantic.vector_rows())
                edges = sorted((ids[a], ids[b], w) for a, b, w in semantic.edge_rows())
                result[scope_ref] = (vectors, edges)
            return result

    def rows(self) -> dict[str, list[tuple[object, ...]]]:
        """Every scope's `ScopeIndex.rows()` (a diagnostic for tests and checks)."""
        with self._lock:
            return {scope_ref: scope.rows() for scope_ref, scope in sorted(self._scopes.items())}

    def load(self, tx: Transaction) -> None:
        """Rebuild every scope from the store as `tx` sees it (at open, before serving)."""
        self.install(*self.read(tx, indexed_scopes(tx)))

    def read(
        self, tx: Transaction, scope_refs: Sequence[str]
    ) -> tuple[dict[str, ScopeIndex], SemanticProjection | None]:
        """The indexes of `scope_refs` and the kept vectors' projection as `tx` sees them,
        built beside what searches use now (nothing held here is touched)."""
        scopes = load_scopes(tx, scope_refs)
        return scopes, None if self._keeping is None else self._keeping.load(tx, scopes)

    @property
    def model(self) -> EmbeddingModel | None:
        """The semantic channel's model, None without one."""
        return None if self._keeping is None else self._keeping.model

    def export(
        self,
        in_step: Callable[[], bool],
        export: Callable[[Mapping[str, ScopeIndex], SemanticProjection | None], T],
    ) -> T | None:
        """`export` of what is held, under the lock, or None when it cannot be trusted to
        match the store (not loaded, stopped following, or `in_step` false)."""
        with self._lock:
            if not self._load_done.is_set() or not self._usable or not in_step():
                return None
            return export(self._scopes, self.semantic)

    def begin_loading(self) -> None:
        """A load runs beside serving: semantic searches wait for `install` (or
        `load_failed`), lexical ones read the store meanwhile (the index is not usable)."""
        self._load_done.clear()

    def install(
        self,
        scopes: dict[str, ScopeIndex],
        semantic: SemanticProjection | None,
        later: Sequence[Sequence[IndexChange]] = (),
    ) -> None:
        """Serve from `scopes` and `semantic`, after applying `later`: the changes of the
        commits that ended after the snapshot they were read from, in commit order."""
        with self._lock:
            self._scopes, self.semantic = scopes, semantic
            self._usable = True
            for changes in later:
                self._apply_locked(changes)
        self._load_done.set()

    def load_failed(self) -> None:
        """The load beside serving did not complete: searches read the store until restart
        (semantic ones answer RANKING_UNAVAILABLE)."""
        self._load_done.set()

    def embedder_idle(self, timeout: float) -> bool:
        """Wait until no embedder runs (every queued record embedded and its vector kept):
        tests and benchmarks. False when one still runs after `timeout` seconds."""
        with self._lock:
            self._start_embedder()
            embedder = self._embedder
        if embedder is not None:
            embedder.join(timeout)
        return not (embedder is not None and embedder.is_alive())

    def stop_embedding(self, timeout: float) -> None:
        """Let the embedder finish (and keep) the batch in hand, then end: before the store
        closes under it. Records still queued are embedded at the next start."""
        with self._lock:
            self._embedding_stopped = True
            embedder = self._embedder
        if embedder is not None:
            embedder.join(timeout)

    def start_embedding(self) -> None:
        """Embed the records loaded without a kept vector (after the load: serving goes on)."""
        with self._lock:
            self._start_embedder()
