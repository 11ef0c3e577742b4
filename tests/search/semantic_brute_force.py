"""`semantic_v1` evaluated the slow, obvious way (dicts and loops, the reference engine's
PageRank loop), for the differential test of search/semantic_ranking.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from engram_memory.search.ranking import (
    LEXICAL_WEIGHT,
    MAX_CANDIDATES,
    RECENCY_WEIGHT,
    RRF_K,
    recency,
    utf16_key,
)
from engram_memory.search.semantic_ranking import (
    PPR_ALPHA,
    PPR_LAZY,
    PPR_MAX_ITERATIONS,
    PPR_SCORE_DECIMALS,
    PPR_TOLERANCE,
    VECTOR_MATCH_FLOOR,
)


def pagerank(
    ids: Sequence[str], edges: Mapping[str, Mapping[str, float]], bm25: Mapping[str, float]
) -> dict[str, float]:
    """PPR over `edges` induced on `ids` (edges to other ids are ignored)."""
    n = len(ids)
    eligible = set(ids)
    total = sum(bm25.get(i, 0.0) for i in ids)
    p = {i: (bm25.get(i, 0.0) / total if total > 0 else 1 / n) for i in ids}
    out = {i: {j: w for j, w in edges.get(i, {}).items() if j in eligible and j != i} for i in ids}
    r = dict(p)
    for _ in range(PPR_MAX_ITERATIONS):
        dangling = sum(r[i] for i in ids if not out[i])
        nxt = {i: (1 - PPR_ALPHA) * p[i] + PPR_ALPHA * dangling * p[i] for i in ids}
        for i in ids:
            weight = sum(out[i].values())
            if not out[i]:
                continue
            nxt[i] += PPR_ALPHA * PPR_LAZY * r[i]
            for j, w in out[i].items():
                nxt[j] += PPR_ALPHA * (1 - PPR_LAZY) * r[i] / weight * w
        delta = sum(abs(nxt[i] - r[i]) for i in ids)
        r = nxt
        if delta <= PPR_TOLERANCE:
            break
    return r


def _ordered(scores: Mapping[str, float], floor: float) -> list[str]:
    kept = [i for i, s in scores.items() if s > floor]
    return sorted(kept, key=lambda i: (-scores[i], utf16_key(i)))[:MAX_CANDIDATES]


def rank(
    ids: Sequence[str],
    bm25: Mapping[str, float],
    edges: Mapping[str, Mapping[str, float]],
    similarity: Mapping[str, float],
    valid_ends: Mapping[str, int | None],
    valid_as_of: int,
) -> list[tuple[str, float]]:
    """(record_id, score), best first."""
    if not ids:
        return []
    ppr = {i: round(s, PPR_SCORE_DECIMALS) for i, s in pagerank(ids, edges, bm25).items()}
    lists = [
        _ordered({i: bm25.get(i, 0.0) for i in ids}, 0.0),
        _ordered(ppr, 0.0),
        _ordered({i: similarity.get(i, 0.0) for i in ids}, VECTOR_MATCH_FLOOR),
    ]
    fused: dict[str, float] = {}
    for ordered in lists:
        for position, record_id in enumerate(ordered, start=1):
            fused[record_id] = fused.get(record_id, 0.0) + 1 / (RRF_K + position)
    if not fused:
        return []
    top = max(fused.values())
    combined = []
    for record_id, value in fused.items():
        fresh = recency(valid_as_of, valid_ends[record_id])
        combined.append((LEXICAL_WEIGHT * (value / top) + RECENCY_WEIGHT * fresh, fresh, record_id))
    combined.sort(key=lambda item: (-item[0], -item[1], utf16_key(item[2])))
    return [(record_id, score) for score, _, record_id in combined[:MAX_CANDIDATES]]
