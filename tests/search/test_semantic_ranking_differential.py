"""search/semantic_ranking.py (numpy, what search runs) equals the brute force of
tests/search/semantic_brute_force.py on random corpora: same ids in the same order, same
scores, for random BM25 values, graphs (with edges leaving E), similarities and valid ends."""

from __future__ import annotations

import random

import numpy as np
import pytest

from engram_memory.search.semantic_ranking import (
    OPEN_END,
    InducedAdjacency,
    channel_order,
    id_ranks,
    personalized_pagerank,
    rank_semantic,
)
from tests.search import semantic_brute_force

VALID_AS_OF = 1_800_000_000_000


def _corpus(seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    size = rng.choice((0, 1, 2, 5, 30, 200))
    ids = sorted({f"mem_{rng.getrandbits(40):010x}" for _ in range(size)})
    rng.shuffle(ids)
    outside = [f"mem_zz{n}" for n in range(3)]  # neighbours that are not eligible
    lexical_share = rng.choice((0.0, 0.1, 0.5))
    bm25 = {
        i: rng.choice((1.0, 2.5, rng.random() * 9)) for i in ids if rng.random() < lexical_share
    }
    edges: dict[str, dict[str, float]] = {}
    for _ in range(rng.randint(0, 3 * max(1, len(ids)))):
        a = rng.choice(ids + outside)
        b = rng.choice(ids + outside)
        if a != b:
            weight = rng.choice((1.0, 2.0))
            edges.setdefault(a, {})[b] = weight
            edges.setdefault(b, {})[a] = weight
    similarity = {i: rng.choice((0.0, -0.2, rng.random(), 0.5)) for i in ids}
    ends = {i: rng.choice((None, VALID_AS_OF, VALID_AS_OF - rng.randint(1, 10**10))) for i in ids}
    return {"ids": ids, "bm25": bm25, "edges": edges, "similarity": similarity, "ends": ends}


def _csr(ids: list[str], edges: dict[str, dict[str, float]]) -> InducedAdjacency:
    position = {record_id: n for n, record_id in enumerate(ids)}
    offsets, neighbours, weights = [0], [], []
    for record_id in ids:
        for other, weight in sorted(edges.get(record_id, {}).items()):
            if other in position and other != record_id:
                neighbours.append(position[other])
                weights.append(weight)
        offsets.append(len(neighbours))
    return InducedAdjacency(
        np.array(offsets, dtype=np.int64),
        np.array(neighbours, dtype=np.int64),
        np.array(weights, dtype=np.float64),
    )


@pytest.mark.parametrize("seed", range(60))
def test_fast_ranking_equals_brute_force(seed: int) -> None:
    corpus = _corpus(seed)
    ids: list[str] = corpus["ids"]  # type: ignore[assignment]
    bm25: dict[str, float] = corpus["bm25"]  # type: ignore[assignment]
    edges: dict[str, dict[str, float]] = corpus["edges"]  # type: ignore[assignment]
    similarity: dict[str, float] = corpus["similarity"]  # type: ignore[assignment]
    ends: dict[str, int | None] = corpus["ends"]  # type: ignore[assignment]
    expected = semantic_brute_force.rank(ids, bm25, edges, similarity, ends, VALID_AS_OF)
    ranked = rank_semantic(
        id_order=id_ranks(np.array([i.encode("ascii") for i in ids], dtype="S64")),
        bm25=np.array([bm25.get(i, 0.0) for i in ids], dtype=np.float64),
        adjacency=_csr(ids, edges),
        similarity=np.array([similarity[i] for i in ids], dtype=np.float64),
        valid_ends=np.array(
            [OPEN_END if ends[i] is None else ends[i] for i in ids], dtype=np.int64
        ),
        valid_as_of=VALID_AS_OF,
    )
    assert [ids[p] for p in ranked.positions] == [record_id for record_id, _ in expected]
    assert ranked.scores.tolist() == [score for _, score in expected]


@pytest.mark.parametrize("seed", range(20))
def test_pagerank_matches_the_reference_loop(seed: int) -> None:
    corpus = _corpus(1000 + seed)
    ids: list[str] = corpus["ids"]  # type: ignore[assignment]
    if not ids:
        return
    bm25: dict[str, float] = corpus["bm25"]  # type: ignore[assignment]
    edges: dict[str, dict[str, float]] = corpus["edges"]  # type: ignore[assignment]
    expected = semantic_brute_force.pagerank(ids, edges, bm25)
    fast = personalized_pagerank(
        _csr(ids, edges), np.array([bm25.get(i, 0.0) for i in ids], dtype=np.float64)
    )
    assert fast.tolist() == pytest.approx([expected[i] for i in ids], rel=1e-9, abs=1e-15)
    assert float(fast.sum()) == pytest.approx(1.0, abs=1e-9)  # mass is conserved


def test_no_lexical_match_teleports_uniformly_so_every_eligible_record_enters_the_graph_list() -> (
    None
):
    # The property that bounds semantic_v1's paraphrase recall (bench/results/semantic_recall.md):
    # without a lexical match PPR ranks all of E, by id among equals.
    ids = ["mem_a", "mem_b", "mem_c"]
    ranked = rank_semantic(
        id_order=id_ranks(np.array([i.encode() for i in ids], dtype="S64")),
        bm25=np.zeros(3),
        adjacency=_csr(ids, {}),
        similarity=np.array([0.0, 0.0, 0.9]),
        valid_ends=np.full(3, OPEN_END, dtype=np.int64),
        valid_as_of=VALID_AS_OF,
    )
    # mem_c: vector 1st + graph 3rd beats mem_a: graph 1st only.
    assert [ids[p] for p in ranked.positions] == ["mem_c", "mem_a", "mem_b"]


@pytest.mark.parametrize("seed", range(6))
def test_capped_channel_order_equals_the_full_sort(seed: int) -> None:
    # Above 2,000 kept scores only the first 2,000 are sorted (partition, then the lowest ids
    # among the scores tied at the cut): the same list as sorting everything, ties included.
    rng = np.random.default_rng(seed)
    size = int(rng.choice((1999, 2000, 2001, 2500, 6000)))
    distinct = int(rng.choice((1, 3, 50, size)))
    scores = rng.integers(0, distinct, size).astype(np.float64) / max(1, distinct - 1)
    id_order = rng.permutation(size).astype(np.int64)
    kept = np.flatnonzero(scores > 0.0)
    expected = kept[np.lexsort((id_order[kept], -scores[kept]))][:2000]
    assert channel_order(scores, id_order, 0.0).tolist() == expected.tolist()


@pytest.mark.parametrize("seed", range(3))
def test_fast_ranking_equals_brute_force_beyond_the_channel_cap(seed: int) -> None:
    # 2,600 eligible records with few distinct values: each list is cut at 2,000 inside ties
    # (without a lexical match PageRank ties all of E).
    rng = random.Random(seed)
    ids = [f"mem_{n:06d}" for n in range(2600)]
    rng.shuffle(ids)
    bm25 = {i: rng.choice((1.0, 2.5)) for i in ids if seed > 0 and rng.random() < 0.9}
    edges: dict[str, dict[str, float]] = {}
    for _ in range(40):
        a, b = rng.sample(ids, 2)
        edges.setdefault(a, {})[b] = 1.0
        edges.setdefault(b, {})[a] = 1.0
    similarity = {i: rng.choice((0.0, 0.25, 0.5, 0.75)) for i in ids}
    expected = semantic_brute_force.rank(
        ids, bm25, edges, similarity, dict.fromkeys(ids), VALID_AS_OF
    )
    ranked = rank_semantic(
        id_order=id_ranks(np.array([i.encode("ascii") for i in ids], dtype="S64")),
        bm25=np.array([bm25.get(i, 0.0) for i in ids], dtype=np.float64),
        adjacency=_csr(ids, edges),
        similarity=np.array([similarity[i] for i in ids], dtype=np.float64),
        valid_ends=np.full(len(ids), OPEN_END, dtype=np.int64),
        valid_as_of=VALID_AS_OF,
    )
    assert [ids[p] for p in ranked.positions] == [record_id for record_id, _ in expected]
    assert ranked.scores.tolist() == [score for _, score in expected]
