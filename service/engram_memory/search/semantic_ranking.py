"""`semantic_v1`: RRF over the lexical list, personalized PageRank on the induced adjacency and
the vector matches, then the 0.85/0.15 recency combination (SPEC §10.2), as written.

Inputs are arrays over the eligible set E (positions 0..n-1, any order) so the same function
serves the in-process index and the tests' brute force (tests/search/semantic_brute_force.py):

- `bm25`: each eligible record's BM25F (0 = no lexical match), the lexical list's key;
- the adjacency induced on E as CSR (`offsets`, `neighbours`, `weights`), both directions;
- `similarity`: each eligible record's cosine similarity with the query vector.

Project decisions where SPEC §10.2 is silent (all pinned in `PROFILE_CONSTANTS`):
- PageRank follows the reference engine: teleport `p` ∝ bm25 (uniform when all are 0); each
  iteration `next = (1−α)p + α·dangling·p`, a node with edges keeps `α·lazy` of its mass and
  spreads `α·(1−lazy)` over its edges by weight, a node without edges (dangling) hands its
  mass to the teleport; stop when the L1 change ≤ 1e-6 or after 100 iterations. The PPR list
  holds the nodes with a positive score.
- PageRank scores are rounded to 12 decimal places before they are sorted: summation order
  differs between implementations by an ulp, and a score is only accurate to the 1e-6 L1
  tolerance anyway, so ties stay ties whichever implementation ran.
- A vector match is an eligible record with similarity > 0 (a text with no known token has
  the zero vector and matches nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engram_memory.search.ranking import (
    LEXICAL_WEIGHT,
    MAX_CANDIDATES,
    RECENCY_WEIGHT,
    RRF_K,
    recency,
)
from engram_memory.search.ranking import PROFILE_CONSTANTS as LEXICAL_CONSTANTS

Floats = npt.NDArray[np.float64]
Int64s = npt.NDArray[np.int64]

PROFILE = "semantic_v1"
PROFILE_VERSION = "1.0.0"
SCORING_FORMULA_REF = "graphify-memory:semantic-rrf-recency:v1"
PPR_ALPHA = 0.85
PPR_LAZY = 0.6
PPR_TOLERANCE = 1e-6
PPR_MAX_ITERATIONS = 100
PPR_SCORE_DECIMALS = 12
VECTOR_MATCH_FLOOR = 0.0
# A valid time without an end, as the lexical index stores it (search/columns.py `OPEN`).
OPEN_END = np.iinfo(np.int64).max
CHANNEL_CAP = MAX_CANDIDATES


def profile_constants(vector_model_ref: str) -> dict[str, object]:
    """The hashed profile configuration: the lexical constants plus PPR, the vector model and
    the channels (projection positions go into the receipt's projection digests)."""
    constants: dict[str, object] = dict(LEXICAL_CONSTANTS)
    constants["profile"] = PROFILE
    constants["ppr"] = {
        "alpha": PPR_ALPHA,
        "lazy": PPR_LAZY,
        "tolerance": PPR_TOLERANCE,
        "max_iterations": PPR_MAX_ITERATIONS,
        "score_decimals": PPR_SCORE_DECIMALS,
    }
    constants["vector_model_ref"] = vector_model_ref
    constants["vector_match_floor"] = VECTOR_MATCH_FLOOR
    constants["channels"] = {"lexical": True, "induced_ppr": True, "vector": True}
    return constants


@dataclass(frozen=True)
class InducedAdjacency:
    """CSR over positions 0..n-1 of E: node i's edges are `neighbours[offsets[i]:offsets[i+1]]`."""

    offsets: Int64s
    neighbours: Int64s
    weights: Floats


@dataclass(frozen=True)
class SemanticRanked:
    """Positions into E (best first, at most 2,000) with final scores and recencies."""

    positions: Int64s
    scores: Floats
    recency: Floats


def personalized_pagerank(adjacency: InducedAdjacency, bm25: Floats) -> Floats:
    """PPR over the induced adjacency (symmetric, positive weights) with teleport ∝ bm25
    (uniform if all 0).

    Iterated over the nodes with edges only: a node without edges (dangling) receives no
    share and keeps none, so its score is always `s·p_i` for one scalar `s` that the
    iteration carries (s₀ = 1, s' = (1−α) + α·s·P_D, P_D the dangling nodes' teleport
    mass). Algebraically the reference iteration; on the 10k-record bench 98 of 10,000
    nodes have edges, so an iteration costs microseconds instead of a pass over E.

    Raises:
        Nothing for a consistent CSR.
    """
    n = len(bm25)
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    total = float(bm25.sum())
    teleport = bm25 / total if total > 0 else np.full(n, 1 / n, dtype=np.float64)
    # Only the nodes with edges and the edges are touched from here on, as local indexes
    # among `linked`: edge weights are positive and the adjacency symmetric, so a node with
    # an edge has a positive out-weight and every neighbour is linked too.
    degree = np.diff(adjacency.offsets)
    linked = np.flatnonzero(degree > 0)
    weight_linked = (
        np.add.reduceat(adjacency.weights, adjacency.offsets[linked])
        if len(linked)
        else np.zeros(0, dtype=np.float64)
    )
    edge_from = np.repeat(np.arange(len(linked)), degree[linked])
    edge_to = np.searchsorted(linked, adjacency.neighbours)
    p_linked = teleport[linked]
    dangling_teleport = float(teleport.sum() - p_linked.sum())
    r_linked = p_linked.copy()
    scale = 1.0  # dangling node i holds scale·p_i
    for _ in range(PPR_MAX_ITERATIONS):
        dangling = scale * dangling_teleport
        base = (1 - PPR_ALPHA) + PPR_ALPHA * dangling
        share = (PPR_ALPHA * (1 - PPR_LAZY) * r_linked) / weight_linked
        following = base * p_linked + PPR_ALPHA * PPR_LAZY * r_linked
        following = following + np.bincount(
            edge_to, weights=share[edge_from] * adjacency.weights, minlength=len(linked)
        )
        delta = float(np.abs(following - r_linked).sum()) + abs(base - scale) * dangling_teleport
        r_linked, scale = following, base
        if delta <= PPR_TOLERANCE:
            break
    scores = scale * teleport
    scores[linked] = r_linked
    return scores


def channel_order(scores: Floats, id_order: Int64s, floor: float) -> Int64s:
    """Positions with a score above `floor`, score desc then record id asc, first 2,000;
    `id_order` ranks each position's record id (sorting integers, not the ids, per list).

    Only the first 2,000 are sorted: the 2,000th score is found by partition, every score
    above it is in, and of the scores equal to it the lowest ids fill the rest, which is
    exactly the first 2,000 of the full sort (a uniform PageRank ties all of E).
    """
    kept = np.flatnonzero(scores > floor)
    if len(kept) > CHANNEL_CAP:
        kept_scores = scores[kept]
        threshold = np.partition(kept_scores, len(kept) - CHANNEL_CAP)[len(kept) - CHANNEL_CAP]
        above = kept[kept_scores > threshold]
        tied = kept[kept_scores == threshold]
        wanted = CHANNEL_CAP - len(above)
        if len(tied) > wanted:
            tied = tied[np.argpartition(id_order[tied], wanted - 1)[:wanted]]
        kept = np.concatenate([above, tied])
    order = np.lexsort((id_order[kept], -scores[kept]))[:CHANNEL_CAP]
    result: Int64s = kept[order]
    return result


def id_ranks(id_keys: npt.NDArray[np.bytes_]) -> Int64s:
    """Each position's rank in record id order (ids are unique, so ranks are too)."""
    ranks = np.empty(len(id_keys), dtype=np.int64)
    ranks[np.argsort(id_keys, kind="stable")] = np.arange(len(id_keys), dtype=np.int64)
    return ranks


def rank_semantic(
    *,
    id_order: Int64s,
    bm25: Floats,
    adjacency: InducedAdjacency,
    similarity: Floats,
    valid_ends: Int64s,
    valid_as_of: int,
) -> SemanticRanked:
    """The semantic_v1 ranked list over E. `id_order` ranks each record's id: any distinct
    integers in record id order (`id_ranks` of the ASCII ids, whose byte order is UTF-16
    order, the tie-break; the service passes a rank cached per slot, semantic_scope.py);
    `valid_ends` each record's valid-time end, `OPEN_END` when open.

    Raises:
        Nothing for consistent inputs.
    """
    n = len(bm25)
    lexical = channel_order(bm25, id_order, 0.0)
    ppr = np.round(personalized_pagerank(adjacency, bm25), PPR_SCORE_DECIMALS)
    graph = channel_order(ppr, id_order, 0.0)
    vector = channel_order(similarity, id_order, VECTOR_MATCH_FLOOR)
    # Each list adds its RRF term in list order (lexical, graph, vector), as the brute force
    # does, so every fused double is bit-for-bit the same; only listed positions are touched.
    fused = np.zeros(n, dtype=np.float64)
    for ordered in (lexical, graph, vector):
        fused[ordered] += 1 / (RRF_K + np.arange(1, len(ordered) + 1, dtype=np.float64))
    candidates = np.flatnonzero(fused > 0)
    if len(candidates) == 0:
        empty = np.zeros(0, dtype=np.float64)
        return SemanticRanked(np.zeros(0, dtype=np.int64), empty, empty)
    normalized = fused[candidates] / float(fused[candidates].max())
    freshness = _recency(valid_as_of, valid_ends[candidates])
    score = LEXICAL_WEIGHT * normalized + RECENCY_WEIGHT * freshness
    order = np.lexsort((id_order[candidates], -freshness, -score))[:MAX_CANDIDATES]
    return SemanticRanked(candidates[order], score[order], freshness[order])


def _recency(valid_as_of: int, valid_ends: Int64s) -> Floats:
    """`ranking.recency` per record (`OPEN_END`: no end). Only a record whose valid time
    ended before `valid_as_of` has an age; `exp` only through `math.exp`, as ranking does."""
    freshness = np.ones(len(valid_ends), dtype=np.float64)
    for position in np.flatnonzero(valid_ends < valid_as_of).tolist():
        freshness[position] = recency(valid_as_of, int(valid_ends[position]))
    return freshness
