"""Which ranking profile a search uses (SPEC §10.2), and the semantic_v1 ranked list.

`semantic_v1` is available when the semantic projections are configured (the `[semantic]`
extra and its model loaded at start) AND the policy's `semantic` decision permits the
binding (default: not permitted; its receipt goes to the call's audit entry). The channel is
local, so `capability_policy.network` changes nothing: `allow` grants nothing by itself.
`lexical_and_semantic` without it is RANKING_UNAVAILABLE (retriable), never a lexical
answer; `lexical` takes it when available, else `offline_lexical_v1`. A page cursor pins the
profile: a continuation of a semantic list that can no longer be ranked semantically is
RANKING_UNAVAILABLE too.
"""

from __future__ import annotations

from collections.abc import Sequence

from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import digest
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.core.call_audit import CallAudit
from engram_memory.core.runtime import CallContext
from engram_memory.core.search_index import SemanticList
from engram_memory.search import semantic_ranking
from engram_memory.search.receipts import SearchParameters
from engram_memory.tools import reading


def use_semantic(
    ctx: CallContext, audit: CallAudit, params: SearchParameters, pinned_profile: str | None
) -> bool:
    """True for semantic_v1, False for offline_lexical_v1.

    Raises:
        ToolError: RANKING_UNAVAILABLE when semantic_v1 is required (by the request or the
            cursor) and not configured or not permitted; POLICY_* from the decider.
    """
    required = params.capability_policy["minimum_channels"] == "lexical_and_semantic"
    if pinned_profile is not None:
        required = pinned_profile == semantic_ranking.PROFILE
        if not required:
            return False
    index = ctx.services.search_index
    if index is None or index.semantic is None:
        if required:
            raise ToolError(ErrorCode.RANKING_UNAVAILABLE, "semantic channel not configured")
        return False
    result = ctx.services.decider.semantic_channel(ctx.subject)
    audit.decided(result.decision)
    if not result.allow:
        if required:
            raise ToolError(ErrorCode.RANKING_UNAVAILABLE, "semantic channel not permitted")
        return False
    return True


def semantic_list(
    ctx: CallContext,
    terms: Sequence[str],
    query: str,
    as_of: reading.AsOf,
    sequence: int | None,
) -> SemanticList:
    """The semantic_v1 ranked list from the in-process projections.

    Raises:
        ToolError: RANKING_UNAVAILABLE (retriable) when the projections cannot be trusted
            for this snapshot (a commit racing it, or the index stopped following).
    """
    index = ctx.services.search_index
    database = ctx.services.database
    semantic = None if index is None else index.semantic
    if index is None or semantic is None or sequence is None:
        raise ToolError(ErrorCode.RANKING_UNAVAILABLE, "semantic projections not in step")
    query_vector = semantic.model.embed([query])[0]
    ranked = index.rank_semantic(
        ctx.scope_ref,
        terms,
        query_vector,
        in_step=lambda: database.index_commits.sequence() == sequence,
        system_as_of=as_of.system_as_of,
        valid_as_of=as_of.valid_as_of,
        now_ms=ctx.now_ms,
    )
    if ranked is None:
        raise ToolError(ErrorCode.RANKING_UNAVAILABLE, "semantic projections not in step")
    return ranked


def projection_receipts(ranked: SemanticList, system_as_of: str) -> list[str]:
    """The lexical index, the adjacency and the vector projections, each at its position."""
    return [
        digest("projection-receipt", {"projection": "lexical_index", "system_as_of": system_as_of}),
        digest(
            "projection-receipt",
            {
                "projection": "semantic_adjacency",
                "system_as_of": system_as_of,
                "induced_edges": ranked.edge_count,
                "eligible_count": ranked.eligible_count,
            },
        ),
        digest(
            "projection-receipt",
            {
                "projection": "vector",
                "system_as_of": system_as_of,
                "model_ref": ranked.model_ref,
                "vectors": ranked.vector_count,
            },
        ),
    ]


def config_digest(ranked: SemanticList) -> str:
    return digest(
        "recall-profile-config", normalize(semantic_ranking.profile_constants(ranked.model_ref))
    )
