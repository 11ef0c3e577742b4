"""One scope's semantic projections in memory: the vector projection (one unit vector per
record) and the semantic adjacency projection (edges between records, ids only), both indexed
by the slots of the scope's lexical `ScopeIndex`, whose eligibility decides E.

Adjacency (project decision): two records are adjacent when they cite the same source
document, i.e. a citation with the same `locator` (scheme and value) and `source_ref`; the
edge weight is the number of such shared citations. A citation cited by more than
`MAX_SHARED_CITATION` records links none of them (a catch-all locator would make the graph
dense and say nothing). The edge set is a function of the live records only, whatever order
they arrived in, so a followed projection equals one rebuilt from the store. Citations are
held as keyed hashes (HMAC under the scope's index key), never in plaintext.

Nearest-neighbour edges were left out: a threshold edge set over 100k records needs every
pair at start (minutes on two cores), and the vector channel already ranks by similarity.

Vectors are derived from content: in plaintext they live in memory only (the store keeps
them sealed, core/kept_vectors.py, and a start loads them from there); a purged record's
vector row is zeroed at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from engram_memory.search.index_ranking import eligible_bm25
from engram_memory.search.scope_index import ScopeIndex
from engram_memory.search.semantic_ranking import InducedAdjacency, rank_semantic

Floats32 = npt.NDArray[np.float32]
Int64s = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

MAX_SHARED_CITATION = 32


class SemanticScope:
    """Vectors and citation edges of one scope; every method runs under the owner's lock."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._vectors = np.zeros((16, dimensions), dtype=np.float32)
        self._present = np.zeros(16, dtype=np.bool_)
        self._citations: dict[int, tuple[str, ...]] = {}
        # Slots by citation key, made from `_citations` when first needed (`_by_key`): a
        # start holds 100k records' citations and builds it only for a change or a search.
        self._cited_by: dict[str, set[int]] | None = {}
        self._edges: tuple[Int64s, Int64s, npt.NDArray[np.float64]] | None = None
        # Slots in record id order and each slot's rank in it, for the first `_ranked` slots
        # of the lexical index (slots are append-only and never change id).
        self._id_sorted = np.zeros(0, dtype=np.int64)
        self._id_rank = np.zeros(0, dtype=np.int64)

    def _grow(self, slot: int) -> None:
        if slot < len(self._present):
            return
        size = max(2 * len(self._present), slot + 1)
        vectors = np.zeros((size, self.dimensions), dtype=np.float32)
        vectors[: len(self._vectors)] = self._vectors
        present = np.zeros(size, dtype=np.bool_)
        present[: len(self._present)] = self._present
        self._vectors, self._present = vectors, present

    def add(self, slot: int, vector: Floats32, citation_keys: Sequence[str]) -> None:
        """A record's vector and keyed citations (replacing any earlier ones of the slot)."""
        self.set_citations(slot, citation_keys)
        self.set_vector(slot, vector)

    def load(
        self, slots: Sequence[int], vectors: Floats32, citations: Sequence[tuple[str, ...]]
    ) -> None:
        """Fill empty slots at once (at open, from the kept vectors): `citations` are each
        sorted and distinct already, as `set_citations` keeps them."""
        if not slots:
            return
        self._grow(max(slots))
        at = np.asarray(slots, dtype=np.int64)
        self._vectors[at] = vectors
        self._present[at] = True
        for slot, keys in zip(slots, citations, strict=True):
            if keys:
                self._citations[slot] = keys
        self._cited_by = None
        self._edges = None

    def _by_key(self) -> dict[str, set[int]]:
        if self._cited_by is None:
            cited_by: dict[str, set[int]] = {}
            for slot, keys in self._citations.items():
                for key in keys:
                    cited_by.setdefault(key, set()).add(slot)
            self._cited_by = cited_by
        return self._cited_by

    def set_citations(self, slot: int, citation_keys: Sequence[str]) -> None:
        """A record's keyed citations, replacing the slot's earlier citations and vector (its
        vector follows with `set_vector` once embedded)."""
        self.remove(slot)
        self._grow(slot)
        keys = tuple(sorted(set(citation_keys)))
        self._citations[slot] = keys
        cited_by = self._by_key()
        for key in keys:
            cited_by.setdefault(key, set()).add(slot)
        self._edges = None

    def set_vector(self, slot: int, vector: Floats32) -> None:
        self._grow(slot)
        self._vectors[slot] = vector
        self._present[slot] = True

    def remove(self, slot: int) -> None:
        """Forget a record: its vector row is zeroed and its edges dropped."""
        if slot < len(self._present) and self._present[slot]:
            self._vectors[slot] = 0.0
            self._present[slot] = False
        cited_by = self._by_key()
        for key in self._citations.pop(slot, ()):
            members = cited_by[key]
            members.discard(slot)
            if not members:
                del cited_by[key]
        self._edges = None

    def id_order(self, lexical: ScopeIndex, slots: Int64s) -> Int64s:
        """Each slot's rank in record id order (the tie-break), from a cache that new slots
        are merged into: sorting 100k ids per search would cost 40 ms."""
        count = len(lexical.record_ids)
        ranked = len(self._id_rank)
        if count != ranked:
            keys = lexical.id_keys(np.arange(count, dtype=np.int64))
            if count < ranked or ranked == 0:
                ordered = np.argsort(keys, kind="stable").astype(np.int64)
            else:
                new = np.arange(ranked, count, dtype=np.int64)
                new = new[np.argsort(keys[new], kind="stable")]
                at = np.searchsorted(keys[self._id_sorted], keys[new])
                ordered = np.insert(self._id_sorted, at, new)
            rank = np.empty(count, dtype=np.int64)
            rank[ordered] = np.arange(count, dtype=np.int64)
            self._id_sorted, self._id_rank = ordered, rank
        result: Int64s = self._id_rank[slots]
        return result

    def held(self, slot_count: int) -> tuple[Int64s, Floats32, list[tuple[str, ...]]]:
        """The slots below `slot_count` holding a vector, their vectors and citations (what
        `load` takes back; the index keeping at close reads it under the owner's lock)."""
        present = self._present[:slot_count]
        slots = np.flatnonzero(present).astype(np.int64)
        citations = [self._citations.get(int(slot), ()) for slot in slots]
        return slots, self._vectors[slots], citations

    def vector_count(self) -> int:
        return int(np.count_nonzero(self._present))

    def has_vector(self, slot: int) -> bool:
        return slot < len(self._present) and bool(self._present[slot])

    def vector_rows(self) -> list[tuple[int, tuple[float, ...]]]:
        """Every held (slot, vector), for tests comparing a followed and a rebuilt projection."""
        return [
            (int(slot), tuple(float(x) for x in self._vectors[slot]))
            for slot in np.flatnonzero(self._present)
        ]

    def similarities(self, query: Floats32, slots: Int64s) -> npt.NDArray[np.float64]:
        """Cosine similarity of each slot's vector with the unit `query` (0 without one).
        One product over every held row, then the slots picked: cheaper than gathering the
        rows first (E is most of the scope)."""
        result = np.zeros(len(slots), dtype=np.float64)
        inside = slots < len(self._present)
        if inside.any():
            # Only the rows up to the last slot asked for (the array's capacity doubles, so
            # up to half of it is unused); einsum, not `@`: a BLAS matrix-vector product here
            # takes ~30x longer when the cores are shared (OpenBLAS threads spin against other
            # work), measured at 10k.
            used = int(slots[inside].max()) + 1
            every = np.einsum("ij,j->i", self._vectors[:used], query)
            result[inside] = every[slots[inside]].astype(np.float64)
        return result

    def _all_edges(self) -> tuple[Int64s, Int64s, npt.NDArray[np.float64]]:
        if self._edges is None:
            weights: dict[tuple[int, int], float] = {}
            for members in self._by_key().values():
                if len(members) < 2 or len(members) > MAX_SHARED_CITATION:
                    continue
                ordered = sorted(members)
                for a in ordered:
                    for b in ordered:
                        if a != b:
                            weights[(a, b)] = weights.get((a, b), 0.0) + 1.0
            pairs = sorted(weights)
            self._edges = (
                np.array([a for a, _ in pairs], dtype=np.int64),
                np.array([b for _, b in pairs], dtype=np.int64),
                np.array([weights[p] for p in pairs], dtype=np.float64),
            )
        return self._edges

    def edge_rows(self) -> list[tuple[int, int, float]]:
        sources, targets, weights = self._all_edges()
        return list(zip(sources.tolist(), targets.tolist(), weights.tolist(), strict=True))

    def induced(self, eligible_slots: Int64s, slot_count: int) -> InducedAdjacency:
        """The adjacency induced on exactly `eligible_slots` (ascending), as CSR over their
        positions: an edge with an end outside E is not there."""
        sources, targets, weights = self._all_edges()
        position = np.full(max(slot_count, len(self._present)) + 1, -1, dtype=np.int64)
        position[eligible_slots] = np.arange(len(eligible_slots), dtype=np.int64)
        keep = np.zeros(len(sources), dtype=np.bool_)
        if len(sources):
            keep = (position[sources] >= 0) & (position[targets] >= 0)
        src, dst, w = position[sources[keep]], position[targets[keep]], weights[keep]
        # Sources ascend with their slots (pairs are sorted), so positions ascend too.
        offsets = np.zeros(len(eligible_slots) + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=len(eligible_slots)), out=offsets[1:])
        return InducedAdjacency(offsets, dst, w)


@dataclass(frozen=True)
class ScopeRanked:
    """A scope's semantic_v1 list and what its receipt says of the projections."""

    record_ids: list[str]
    scores: list[float]
    eligible_count: int
    edge_count: int


def rank_with_projections(
    lexical: ScopeIndex,
    semantic: SemanticScope,
    terms: Sequence[str],
    query_vector: Floats32,
    *,
    system_as_of: int,
    valid_as_of: int,
    now_ms: int,
) -> ScopeRanked:
    """semantic_v1 over E of one scope: E and its BM25F from the lexical index, the induced
    adjacency and the similarities from the projections (the caller holds the lock).

    Raises:
        Nothing for consistent projections.
    """
    eligible = eligible_bm25(
        lexical, terms, system_as_of=system_as_of, valid_as_of=valid_as_of, now_ms=now_ms
    )
    slots = eligible.slots
    adjacency = semantic.induced(slots, len(lexical.record_ids))
    ranked = rank_semantic(
        id_order=semantic.id_order(lexical, slots),
        bm25=eligible.bm25,
        adjacency=adjacency,
        similarity=semantic.similarities(query_vector, slots),
        valid_ends=lexical.valid_ends(slots),
        valid_as_of=valid_as_of,
    )
    chosen = slots[ranked.positions].tolist()
    return ScopeRanked(
        list(itemgetter(*chosen)(lexical.record_ids))
        if len(chosen) > 1
        else [lexical.record_ids[slot] for slot in chosen],
        ranked.scores.tolist(),
        len(slots),
        len(adjacency.neighbours),
    )
