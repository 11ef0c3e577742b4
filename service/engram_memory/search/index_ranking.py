"""`offline_lexical_v1` evaluated with numpy over a `ScopeIndex`, bit for bit equal to
`ranking.rank` over the eligible set E (SPEC §10.1).

Only the postings of the query's terms are read: the eligible ones are scored, `n` and the
average field lengths come from the index's aggregates (`ScopeIndex.statistics`). Every
floating-point expression is the reference's, element by element: numpy's `+ - * /` on float64
round exactly like Python's, a doc's field scores are added in `FIELD_NAMES` order and its
term scores in query order (adding the 0.0 of an absent field or term leaves a double
unchanged, as skipping it does), and `exp` is only ever called through `math.exp`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from engram_memory.search.columns import FIELD_SHIFT, OPEN, SLOT_SHIFT, TF_MASK, Bools, Int64s
from engram_memory.search.fields import FIELD_NAMES, FIELD_WEIGHTS
from engram_memory.search.ranking import (
    BM25_B,
    BM25_K1,
    HALF_LIFE_MS,
    LEXICAL_WEIGHT,
    LN2,
    MAX_CANDIDATES,
    RECENCY_WEIGHT,
    RRF_K,
    average_lengths,
    inverse_document_frequency,
)
from engram_memory.search.scope_index import EligibleStatistics, ScopeIndex

Floats = npt.NDArray[np.float64]

_WEIGHTS = np.array([FIELD_WEIGHTS[name] for name in FIELD_NAMES], dtype=np.float64)


@dataclass(frozen=True)
class RankedList:
    """The ranked list (at most 2,000), best first, with each record's final score."""

    record_ids: list[str]
    scores: list[float]
    bm25: list[float]  # each record's BM25F, the lexical list's key (for receipts and tests)
    statistics: EligibleStatistics


@dataclass(frozen=True)
class _TermScores:
    slots: Int64s  # one per eligible document holding the term, in posting order
    field_scores: Floats  # Σ_f w_f·sat_f per document, fields in FIELD_NAMES order
    idf: float


def rank_in_index(
    index: ScopeIndex,
    terms: Sequence[str],
    *,
    system_as_of: int,
    valid_as_of: int,
    now_ms: int,
    exception_share: float | None = None,
) -> RankedList:
    """Rank E at the pinned pair; `terms` are keyed, distinct, in order of first occurrence.

    Raises:
        Nothing for a consistent index.
    """
    scored, statistics, _ = _score_terms(
        index, terms, system_as_of, valid_as_of, now_ms, exception_share, need_mask=False
    )
    ids, scores, bm25 = _lexical_then_final(index, scored, valid_as_of)
    return RankedList(ids, scores, bm25, statistics)


@dataclass(frozen=True)
class EligibleScores:
    """E as slots (ascending) with each one's BM25F (0.0: no lexical match), what
    `semantic_v1` fuses (search/semantic_ranking.py)."""

    slots: Int64s
    bm25: Floats
    statistics: EligibleStatistics


def eligible_bm25(
    index: ScopeIndex, terms: Sequence[str], *, system_as_of: int, valid_as_of: int, now_ms: int
) -> EligibleScores:
    """Every eligible slot's BM25F, the same doubles `rank_in_index` sorts by.

    Raises:
        Nothing for a consistent index.
    """
    scored, statistics, eligible = _score_terms(
        index, terms, system_as_of, valid_as_of, now_ms, None, need_mask=True
    )
    assert eligible is not None  # need_mask
    slots: Int64s = np.flatnonzero(eligible)
    dense = np.zeros(len(index.record_ids), dtype=np.float64)
    if scored:
        documents, bm25 = _bm25(scored, len(index.record_ids))
        dense[documents] = bm25
    return EligibleScores(slots, dense[slots], statistics)


def _score_terms(
    index: ScopeIndex,
    terms: Sequence[str],
    system_as_of: int,
    valid_as_of: int,
    now_ms: int,
    exception_share: float | None,
    *,
    need_mask: bool,
) -> tuple[list[_TermScores], EligibleStatistics, Bools | None]:
    # Listed once: both the statistics and the eligibility mask start from it.
    exceptions = index.exception_slots(system_as_of, valid_as_of)
    statistics = (
        index.statistics(system_as_of, valid_as_of, now_ms, exceptions)
        if exception_share is None
        else index.statistics(
            system_as_of, valid_as_of, now_ms, exceptions, exception_share=exception_share
        )
    )
    n = statistics.document_count
    totals = statistics.field_token_totals
    averages = average_lengths(n, totals)
    average_by_field = np.array([averages[name] for name in FIELD_NAMES], dtype=np.float64)
    scored: list[_TermScores] = []
    eligible: Bools | None = None
    if need_mask:
        eligible = index.eligible_mask(system_as_of, valid_as_of, now_ms, exceptions)
    for term in terms:
        packed = index.postings_of(term)
        if packed is None:
            continue
        if eligible is None:
            eligible = index.eligible_mask(system_as_of, valid_as_of, now_ms, exceptions)
        slots = packed >> SLOT_SHIFT
        keep = eligible[slots]
        packed, slots = packed[keep], slots[keep]
        if len(slots) == 0:
            continue
        # A document's postings of one term are adjacent: each run of one slot is a document.
        next_document = slots[1:] != slots[:-1]
        starts = np.flatnonzero(np.concatenate(([True], next_document)))
        idf = inverse_document_frequency(n, len(starts))
        if idf <= 0:
            continue
        fields = (packed >> FIELD_SHIFT) & 0xFF
        tf = (packed & TF_MASK).astype(np.float64)
        lengths = index.field_lengths(slots, fields)
        norm = (1 - BM25_B) + BM25_B * (lengths / average_by_field[fields])
        sat = (tf * (BM25_K1 + 1)) / (tf + BM25_K1 * norm)
        per_field = np.zeros((len(starts), len(FIELD_NAMES)), dtype=np.float64)
        document = np.concatenate(([0], np.cumsum(next_document)))
        per_field[document, fields] = _WEIGHTS[fields] * sat
        field_scores = per_field[:, 0].copy()
        for column in range(1, len(FIELD_NAMES)):
            field_scores = field_scores + per_field[:, column]
        scored.append(_TermScores(slots[starts], field_scores, idf))
    return scored, statistics, eligible


def _bm25(scored: Sequence[_TermScores], slot_count: int) -> tuple[Int64s, Floats]:
    """(document slots, bm25) over the documents holding any scored term. Several terms add
    up on one dense array over every slot (cheaper than uniting their document lists; the
    0.0 of an absent term leaves a double unchanged)."""
    if len(scored) == 1:
        only = scored[0]
        return only.slots, np.where(only.field_scores > 0, only.idf * only.field_scores, 0.0)
    bm25 = np.zeros(slot_count, dtype=np.float64)
    for term in scored:
        contribution = np.zeros(slot_count, dtype=np.float64)
        contribution[term.slots] = np.where(
            term.field_scores > 0, term.idf * term.field_scores, 0.0
        )
        bm25 = bm25 + contribution
    documents: Int64s = np.flatnonzero(bm25 > 0)
    return documents, bm25[documents]


def _lexical_then_final(
    index: ScopeIndex, scored: Sequence[_TermScores], valid_as_of: int
) -> tuple[list[str], list[float], list[float]]:
    if not scored:
        return [], [], []
    documents, bm25 = _bm25(scored, len(index.record_ids))
    positive = bm25 > 0
    documents, bm25 = documents[positive], bm25[positive]
    if len(documents) > MAX_CANDIDATES:
        # Everything at least as good as the 2,000th score (ties included), then sort those.
        threshold = np.partition(bm25, len(bm25) - MAX_CANDIDATES)[len(bm25) - MAX_CANDIDATES]
        contenders = bm25 >= threshold
        documents, bm25 = documents[contenders], bm25[contenders]
    lexical_order = np.lexsort((index.id_keys(documents), -bm25))[:MAX_CANDIDATES]
    documents, bm25 = documents[lexical_order], bm25[lexical_order]
    position = np.arange(1, len(documents) + 1, dtype=np.float64)
    fused = 1 / (RRF_K + position)
    lexical = fused / (1 / (RRF_K + 1))
    freshness = _recency(valid_as_of, index.valid_ends(documents))
    score = LEXICAL_WEIGHT * lexical + RECENCY_WEIGHT * freshness
    if np.all(score[:-1] > score[1:]):
        # Strictly decreasing already (always so when every recency is 1.0): the final order
        # is the lexical order and no tie needs the record id.
        final = np.arange(len(documents))
    else:
        final = np.lexsort((index.id_keys(documents), -freshness, -score))
    ordered = documents[final].tolist()
    ids = (
        [index.record_ids[slot] for slot in ordered]
        if len(ordered) < 2
        else list(itemgetter(*ordered)(index.record_ids))
    )
    return ids, score[final].tolist(), bm25[final].tolist()


def _recency(valid_as_of: int, valid_ends: Int64s) -> Floats:
    """`ranking.recency` per document; `exp` only through `math.exp` (numpy's may differ in
    the last bit). An eligible record's valid time never ended before `valid_as_of`, so its
    age is 0 and its recency exp(-0.0) = 1.0; the general case is kept for exactness."""
    anchor = np.where(valid_ends == OPEN, valid_as_of, np.minimum(valid_as_of, valid_ends))
    age = np.maximum(0, valid_as_of - anchor)
    freshness = np.ones(len(age), dtype=np.float64)
    for position in np.flatnonzero(age):
        freshness[position] = math.exp((-LN2 * int(age[position])) / HALF_LIFE_MS)
    return freshness
