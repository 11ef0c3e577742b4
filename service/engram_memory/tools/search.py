"""`engram_memory_search`: offline_lexical_v1 over the blind index, paged and redacted (SPEC §4.1).

Ranking, revalidation and materialization of a page share one store snapshot (one
transaction), so no record is skipped or back-filled between them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.digests import digest
from engram_memory.contract.envelope import success_envelope
from engram_memory.contract.errors import ErrorCode, ToolError
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.core import indexing, steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.runtime import CallContext
from engram_memory.policy.decider import AuthzResult
from engram_memory.search.cursor import (
    PageCursorFields,
    decode_page_cursor,
    encode_page_cursor,
    page_binding,
    require_same_ordering,
)
from engram_memory.search.fields import FIELD_NAMES, DocumentTerms, FieldTerms, query_terms
from engram_memory.search.packets import packet_budget, search_packet, take_page
from engram_memory.search.ranking import (
    PROFILE,
    CorpusStatistics,
    RankDocument,
    rank_from_statistics,
)
from engram_memory.search.receipts import (
    DEFAULT_LIMIT,
    DEFAULT_MAX_PACKET_BYTES,
    SearchParameters,
    build_rank_receipt,
    ordered_ids_digest,
    search_output,
)
from engram_memory.store import memory
from engram_memory.store.database import Transaction
from engram_memory.tools import reading

PROJECTIONS = ("lexical_index",)


def _parameters(args: Mapping[str, Any]) -> SearchParameters:
    policy = args.get("capability_policy") or {"minimum_channels": "lexical", "network": "forbid"}
    return SearchParameters(
        query=str(args["query"]),
        purpose_ref=str(args["purpose_ref"]),
        limit=int(args.get("limit", DEFAULT_LIMIT)),
        max_packet_bytes=int(args.get("max_packet_bytes", DEFAULT_MAX_PACKET_BYTES)),
        capability_policy=dict(policy),
    )


def _statistics_and_postings(
    tx: Transaction, ctx: CallContext, terms: Sequence[str], as_of: reading.AsOf
) -> tuple[CorpusStatistics, list[RankDocument], list[str]]:
    """Corpus statistics over the whole eligible set E, and the documents matching any term."""
    eligible = memory.eligible_documents(
        tx,
        ctx.scope_ref,
        system_as_of=as_of.system_as_of,
        valid_as_of=as_of.valid_as_of,
        now_ms=ctx.now_ms,
    )
    by_id = {doc.record_id: doc for doc in eligible}
    totals = {name: sum(doc.field_lengths.get(name, 0) for doc in eligible) for name in FIELD_NAMES}
    counts: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for posting in memory.postings_for_terms(tx, ctx.scope_ref, terms):
        if posting.record_id in by_id:
            counts[posting.record_id][posting.field][posting.term_hash] = posting.tf
    dfs = {
        term: sum(1 for fields in counts.values() if any(term in c for c in fields.values()))
        for term in terms
    }
    matching = [
        RankDocument(
            record_id,
            DocumentTerms(
                {
                    name: FieldTerms(
                        fields.get(name, {}), by_id[record_id].field_lengths.get(name, 0)
                    )
                    for name in FIELD_NAMES
                }
            ),
            by_id[record_id].valid_t_end,
        )
        for record_id, fields in counts.items()
    ]
    eligible_ids = sorted(by_id)
    return CorpusStatistics(len(eligible), totals, dfs), matching, eligible_ids


def _pinned(
    ctx: CallContext, tx: Transaction, cursor: object, binding: str
) -> tuple[reading.AsOf, PageCursorFields | None]:
    high_water = reading.high_water(tx, ctx)
    if cursor is None:
        return reading.AsOf(ctx.now_ms, high_water), None
    fields = decode_page_cursor(str(cursor), binding, ctx.services.root_key.page_cursor_secret())
    if fields.profile != PROFILE or int(fields.system_as_of) > high_water:
        raise ToolError(ErrorCode.STALE_PAGE, "cursor pinned beyond high water or other profile")
    return reading.AsOf(fields.valid_as_of, int(fields.system_as_of)), fields


def search(ctx: CallContext, audit: CallAudit, parsed: ParsedArguments) -> ToolOutcome:
    """Raises: ToolError per SPEC §4.1 (STALE_PAGE, RANKING_UNAVAILABLE, PROJECTION_*, ...)."""
    args = parsed.arguments
    params = _parameters(args)
    if params.capability_policy["minimum_channels"] == "lexical_and_semantic":
        # No semantic projection is configured; never fall back silently (SPEC §10.2).
        raise ToolError(ErrorCode.RANKING_UNAVAILABLE, "semantic channel not configured")
    authz = steps.authorize(ctx, audit)
    binding = page_binding(params, scope_ref=ctx.scope_ref, principal=ctx.invocation.principal)
    terms = query_terms(params.query, indexing.scope_term_key(ctx))
    with ctx.services.database.reading() as tx:
        as_of, pinned = _pinned(ctx, tx, args.get("page_cursor"), binding)
        statistics, matching, eligible_ids = _statistics_and_postings(tx, ctx, terms, as_of)
        ranked = rank_from_statistics(statistics, matching, terms, as_of.valid_as_of)
        candidate_ids = [r.record_id for r in ranked]
        # Revalidation (SPEC §10.3) in the ranking snapshot: one query for all ranked ids.
        rows = {
            record_id: row
            for record_id, row in memory.get_records(tx, ctx.scope_ref, candidate_ids).items()
            if reading.is_eligible(row, as_of, ctx.now_ms)
        }
        ordered = [r for r in ranked if r.record_id in rows]
        ordered_ids = [r.record_id for r in ordered]
        offset = 0
        if pinned is not None:
            require_same_ordering(
                pinned,
                ordered_ids_digest=ordered_ids_digest(ordered_ids),
                ordered_count=len(ordered_ids),
            )
            offset = pinned.offset
        # Only the records a page can hold are opened, still inside the ranking snapshot.
        window = ordered[offset : offset + params.limit]
        bodies = {
            r.record_id: steps.open_item(ctx, r.record_id, rows[r.record_id].sealed_body)
            for r in window
        }

    def packets() -> Iterator[dict[str, JsonValue]]:
        for position, item in enumerate(window, start=offset + 1):
            view, omitted, redaction_digest = reading.redacted_view(
                ctx, authz, bodies[item.record_id]
            )
            yield search_packet(view, omitted, redaction_digest, item.score, position)

    page, next_offset = take_page(
        packets(),
        offset=offset,
        total=len(ordered),
        limit=params.limit,
        budget=packet_budget(params.max_packet_bytes, authz.redaction.max_packet_bytes),
    )
    next_cursor = None
    if next_offset is not None:
        next_cursor = encode_page_cursor(
            PageCursorFields(
                PROFILE,
                as_of.valid_as_of,
                str(as_of.system_as_of),
                next_offset,
                ordered_ids_digest(ordered_ids),
            ),
            binding,
            ctx.services.root_key.page_cursor_secret(),
        )
    receipt = _rank_receipt(ctx, authz, params, as_of, candidate_ids, ordered_ids, eligible_ids)
    output = search_output(page, receipt, next_cursor)
    _check_ceiling(ctx, authz, output)
    return ToolOutcome.succeeded(output, audit)


def _rank_receipt(
    ctx: CallContext,
    authz: AuthzResult,
    params: SearchParameters,
    as_of: reading.AsOf,
    candidate_ids: list[str],
    ordered_ids: list[str],
    eligible_ids: list[str],
) -> dict[str, JsonValue]:
    system_as_of = str(as_of.system_as_of)
    snapshot = {
        "system_as_of": system_as_of,
        "valid_as_of": as_of.valid_as_of,
        "eligible_ids": eligible_ids,
    }
    return build_rank_receipt(
        params=params,
        valid_as_of=as_of.valid_as_of,
        system_as_of=system_as_of,
        candidate_ids=candidate_ids,
        ordered_ids=ordered_ids,
        authorization_receipt_digest=authz.decision.receipt.receipt_digest,
        snapshot_id=f"snapshot:{system_as_of}:{as_of.valid_as_of}",
        snapshot_digest=digest("recall-snapshot", snapshot),
        revalidation_receipt_digest=reading.revalidation_receipt_digest(
            ordered_ids, as_of, ctx.now_instant
        ),
        projection_receipt_digests=[
            digest("projection-receipt", {"projection": name, "system_as_of": system_as_of})
            for name in PROJECTIONS
        ],
        issued_at=ctx.now_instant,
    )


def _check_ceiling(ctx: CallContext, authz: AuthzResult, output: dict[str, JsonValue]) -> None:
    ceiling = min(authz.response_ceiling_bytes, ctx.services.settings.response_ceiling_bytes)
    envelope = success_envelope(output, ctx.invocation.audit_id)
    if len(canonical_json(envelope)) > ceiling:
        raise ToolError(ErrorCode.RESULT_TOO_LARGE, "envelope over response ceiling")
