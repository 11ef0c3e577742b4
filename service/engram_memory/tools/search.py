"""`engram_memory_search`: offline_lexical_v1 over the blind index, paged and redacted (SPEC §4.1).

Ranking, revalidation and materialization of a page share one store snapshot (one
transaction), so no record is skipped or back-filled between them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.digests import digest
from engram_memory.contract.envelope import success_envelope
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.core import indexing, steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.runtime import CallContext
from engram_memory.core.search_index import STABLE_WAIT_S, SemanticList
from engram_memory.policy.decider import AuthzResult
from engram_memory.search import semantic_ranking
from engram_memory.search.cursor import (
    PageCursorFields,
    decode_page_cursor,
    encode_page_cursor,
    page_binding,
    require_same_ordering,
)
from engram_memory.search.fields import query_terms
from engram_memory.search.packets import packet_budget, search_packet, take_page_json
from engram_memory.search.ranking import PROFILE
from engram_memory.search.receipts import (
    DEFAULT_LIMIT,
    DEFAULT_MAX_PACKET_BYTES,
    RankedIdsJson,
    SearchParameters,
    build_rank_receipt,
    search_output_json,
)
from engram_memory.tools import reading
from engram_memory.tools.record_redaction import RecordRedactions, base_classifiers, redaction_of
from engram_memory.tools.search_paths import distinct, page_bodies, ranked_list
from engram_memory.tools.search_semantic import (
    config_digest,
    projection_receipts,
    semantic_list,
    use_semantic,
)


@dataclass(frozen=True)
class Ranking:
    """The ranked list a page is cut from, whichever profile ranked it."""

    record_ids: list[str]
    scores: list[float]
    eligible_count: int
    semantic: SemanticList | None  # None: offline_lexical_v1

    @property
    def profile(self) -> str:
        return PROFILE if self.semantic is None else semantic_ranking.PROFILE


PROJECTIONS = ("lexical_index",)
PROFILES = (PROFILE, semantic_ranking.PROFILE)


def _parameters(args: Mapping[str, Any]) -> SearchParameters:
    policy = args.get("capability_policy") or {"minimum_channels": "lexical", "network": "forbid"}
    return SearchParameters(
        query=str(args["query"]),
        purpose_ref=str(args["purpose_ref"]),
        limit=int(args.get("limit", DEFAULT_LIMIT)),
        max_packet_bytes=int(args.get("max_packet_bytes", DEFAULT_MAX_PACKET_BYTES)),
        capability_policy=dict(policy),
    )


def _pinned(
    ctx: CallContext, cursor: object, binding: str
) -> tuple[reading.AsOf, PageCursorFields | None, str]:
    """(the pinned pair, the cursor's fields, the scope's journal head hash), at the heads
    as last published (no statement)."""
    database = ctx.services.database
    database.read_from_memory()  # a read is in flight (`Snapshot` may never begin one)
    _, heads = database.heads()
    high_water, head_hash = heads.journal_head(ctx.scope_ref)
    if cursor is None:
        return reading.AsOf(ctx.now_ms, high_water), None, head_hash
    fields = decode_page_cursor(str(cursor), binding, ctx.services.root_key.page_cursor_secret())
    if fields.profile not in PROFILES or int(fields.system_as_of) > high_water:
        raise ToolError(ErrorCode.STALE_PAGE, "cursor pinned beyond high water or other profile")
    return reading.AsOf(fields.valid_as_of, int(fields.system_as_of)), fields, head_hash


def search(ctx: CallContext, audit: CallAudit, parsed: ParsedArguments) -> ToolOutcome:
    """Raises: ToolError per SPEC §4.1 (STALE_PAGE, RANKING_UNAVAILABLE, PROJECTION_*, ...)."""
    args = parsed.arguments
    params = _parameters(args)
    index = ctx.services.search_index
    if params.capability_policy["minimum_channels"] == "lexical_and_semantic" and (
        index is None or index.semantic is None
    ):
        # No semantic projection is configured; never fall back silently (SPEC §10.2).
        raise ToolError(ErrorCode.RANKING_UNAVAILABLE, "semantic channel not configured")
    authz = steps.authorize(ctx, audit, base_classifiers(parsed.classifiers))
    binding = page_binding(params, scope_ref=ctx.scope_ref, principal=ctx.invocation.principal)
    terms = distinct(query_terms(params.query, indexing.scope_term_key(ctx)))
    database = ctx.services.database
    sequence = None if index is None else database.index_commits.stable_sequence(STABLE_WAIT_S)
    # The store is read only if the index cannot rank this snapshot or a page's row is not
    # in the read cache; the heads are taken after `sequence`, as a snapshot's would be.
    with reading.Snapshot(ctx) as store_read:
        as_of, pinned, head_hash = _pinned(ctx, args.get("page_cursor"), binding)
        semantic = use_semantic(ctx, audit, params, None if pinned is None else pinned.profile)
        if semantic:
            listed = semantic_list(ctx, terms, params.query, as_of, sequence)
            ranked = Ranking(listed.record_ids, listed.scores, listed.eligible_count, listed)
        else:
            lexical = ranked_list(store_read, ctx, terms, as_of, sequence)
            ranked = Ranking(
                lexical.record_ids, lexical.scores, lexical.statistics.document_count, None
            )
        # Ranking read E of this very snapshot, so revalidating the ranked list (SPEC §10.3)
        # removes nothing: the ordered list is the ranked one.
        ordered_ids = ranked.record_ids
        ids_json = RankedIdsJson.of(ordered_ids)  # serialized once for its three digests
        ordered_digest = ids_json.ordered_digest
        offset = 0
        if pinned is not None:
            require_same_ordering(
                pinned, ordered_ids_digest=ordered_digest, ordered_count=len(ordered_ids)
            )
            offset = pinned.offset
        # Only the records a page can hold are read and opened, in the ranking snapshot.
        window = ordered_ids[offset : offset + params.limit]
        bodies = page_bodies(store_read, ctx, audit, window, as_of)

    # Per record: the call's decision, or the one for the names its classifiers matched.
    redactions = RecordRedactions(ctx, audit, authz, parsed.classifiers)

    def packets() -> Iterator[dict[str, JsonValue] | None]:
        for position, record_id in enumerate(window, start=offset + 1):
            body = bodies.get(record_id)
            if body is None:
                yield None
                continue
            redaction = redaction_of(redactions.applied(body))
            view, omitted, redaction_digest = reading.redacted_view(ctx, redaction, body)
            yield search_packet(
                view, omitted, redaction_digest, ranked.scores[position - 1], position
            )

    page, next_offset, page_json = take_page_json(
        packets(),
        offset=offset,
        total=len(ordered_ids),
        limit=params.limit,
        budget=packet_budget(params.max_packet_bytes, authz.redaction.max_packet_bytes),
    )
    next_cursor = None
    if next_offset is not None:
        next_cursor = encode_page_cursor(
            PageCursorFields(
                ranked.profile,
                as_of.valid_as_of,
                str(as_of.system_as_of),
                next_offset,
                ordered_digest,
            ),
            binding,
            ctx.services.root_key.page_cursor_secret(),
        )
    snapshot = _snapshot_digest(ctx, as_of, head_hash, ranked.eligible_count)
    receipt = _rank_receipt(ctx, authz, params, as_of, ordered_ids, ids_json, snapshot, ranked)
    output, output_json = search_output_json(page_json, page, receipt, next_cursor)
    _check_ceiling(ctx, authz, output_json)
    for packet in page:
        # Every record a page served is an access an auditor must be able to find
        # (`record_access`); the ones a page dropped were named by `page_bodies`.
        record: Any = packet["record"]
        audit.targets(str(record["record_id"]))
    return ToolOutcome.succeeded(output, audit)


def _snapshot_digest(ctx: CallContext, as_of: reading.AsOf, head_hash: str, eligible: int) -> str:
    """`D("recall-snapshot", …)` (project decision): what fixes E, not E itself. The scope's
    journal head hash commits to every state change so far; with the pinned pair and the
    expiry instant it determines E exactly, and `eligible_count` = n is E's size. Hashing E's
    ids instead would cost time in proportion to the corpus on every search."""
    return digest(
        "recall-snapshot",
        {
            "system_as_of": str(as_of.system_as_of),
            "valid_as_of": as_of.valid_as_of,
            "journal_head_hash": head_hash,
            "expiry_checked_at_ms": ctx.now_ms,
            "eligible_count": eligible,
        },
    )


def _rank_receipt(
    ctx: CallContext,
    authz: AuthzResult,
    params: SearchParameters,
    as_of: reading.AsOf,
    ordered_ids: list[str],
    ids_json: RankedIdsJson,
    snapshot_digest: str,
    ranked: Ranking,
) -> dict[str, JsonValue]:
    system_as_of = str(as_of.system_as_of)
    semantic = ranked.semantic
    # The profile decides the projections the receipt names and its formula; the rest of the
    # receipt is the same for both.
    profile: dict[str, Any]
    if semantic is not None:
        profile = {
            "projection_receipt_digests": projection_receipts(semantic, system_as_of),
            "profile": semantic_ranking.PROFILE,
            "profile_version": semantic_ranking.PROFILE_VERSION,
            "scoring_formula_ref": semantic_ranking.SCORING_FORMULA_REF,
            "config_digest": config_digest(semantic),
        }
    else:
        profile = {
            "projection_receipt_digests": [
                digest("projection-receipt", {"projection": name, "system_as_of": system_as_of})
                for name in PROJECTIONS
            ]
        }
    return build_rank_receipt(
        params=params,
        valid_as_of=as_of.valid_as_of,
        system_as_of=system_as_of,
        candidate_ids=ordered_ids,
        ordered_ids=ordered_ids,
        ordered_digest=ids_json.ordered_digest,
        candidates_digest=ids_json.candidates_digest(),
        authorization_receipt_digest=authz.decision.receipt.receipt_digest,
        snapshot_id=f"snapshot:{system_as_of}:{as_of.valid_as_of}",
        snapshot_digest=snapshot_digest,
        revalidation_receipt_digest=ids_json.revalidation_digest(
            as_of.valid_as_of, system_as_of, ctx.now_instant
        ),
        issued_at=ctx.now_instant,
        **profile,
    )


def _check_ceiling(ctx: CallContext, authz: AuthzResult, output_json: bytes) -> None:
    """The envelope's JCS length: the output sits in it whole, once, so its length is the
    envelope's around an empty value plus the output's own (`search_output_json`)."""
    ceiling = min(authz.response_ceiling_bytes, ctx.services.settings.response_ceiling_bytes)
    around = canonical_json(success_envelope({}, ctx.invocation.audit_id))
    if len(around) - len(b"{}") + len(output_json) > ceiling:
        raise ToolError(ErrorCode.RESULT_TOO_LARGE, "envelope over response ceiling")
