"""`engram_memory_capture`: submit a pending, sealed candidate (SPEC §4.3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import (
    candidate_id_for,
    guard_digest,
    one_way_ref,
    payload_digest,
)
from engram_memory.contract.errors import ErrorCode, ToolError
from engram_memory.contract.inputs import check_capture_time_rules
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.contract.types import format_instant, parse_instant
from engram_memory.core import item_keys, steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.records import asserted_trust, build_record, effective_payload
from engram_memory.core.runtime import CallContext
from engram_memory.store import journal, memory


def _resolve_retention(
    ctx: CallContext, audit: CallAudit, payload: Mapping[str, Any]
) -> str | None:
    """Ask `engram.retention`; return the effective `expires_at` Instant, if any.

    Raises:
        ToolError: UNAUTHORIZED when retention is not permitted for this binding.
    """
    retention = payload.get("retention") or {}
    given = retention.get("expires_at")
    result = ctx.services.decider.retention(
        ctx.subject,
        ctx.now_ms,
        str(retention.get("derivative_rule", "make-ineligible")),
        None if given is None else parse_instant(given),
    )
    audit.decided(result.decision)
    if not result.allow:
        raise ToolError(ErrorCode.UNAUTHORIZED, "retention denied")
    if given is not None:
        return str(given)
    return None if result.expires_at_ms is None else format_instant(result.expires_at_ms)


def _check_reconciliation(ctx: CallContext, audit: CallAudit, payload: Mapping[str, Any]) -> None:
    families = list((payload.get("reconciliation") or {}).get("family_refs", []))
    result = ctx.services.decider.reconciliation(ctx.subject, families)
    audit.decided(result.decision)
    if not result.allow:
        raise ToolError(ErrorCode.UNAUTHORIZED, "reconciliation consent missing")


def _duplicate(audit: CallAudit, replay: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """A replay answers with the first result's fields; nothing new is decided or written."""
    candidate_id = str(replay["candidate_id"])
    if candidate_id not in audit.target_ids:
        audit.targets(candidate_id)
    return {**replay, "status": "duplicate_exact"}


def capture(
    ctx: CallContext, audit: CallAudit, parsed: ParsedArguments, confirmation: object
) -> ToolOutcome:
    """Run capture after schema validation; returns the output value with the audit facts.

    Raises:
        ToolError / ProtocolRefusal: per SPEC §4.3 and the processing order of §1.8.
    """
    args = parsed.arguments
    check_capture_time_rules(parsed.model, ctx.now_ms)
    mutation, authz = steps.guard_mutation(ctx, audit, parsed, confirmation, target=None)
    # SPEC §1.8: idempotency before the operation's own decisions, so a replay decides
    # nothing new; read on a snapshot, outside the writer's lock.
    with ctx.services.database.reading() as tx:
        replay = steps.stored_result(tx, ctx, mutation)
        mutation = mutation.absent_in(tx)
    if replay is not None:
        return ToolOutcome.succeeded(_duplicate(audit, replay), audit)

    payload: Mapping[str, Any] = args["payload"]
    expires_at = _resolve_retention(ctx, audit, payload)
    _check_reconciliation(ctx, audit, payload)
    effective = effective_payload(payload, ctx.scope_ref, expires_at)
    source_ref = one_way_ref("capture-source", f"{ctx.scope_ref}\0{ctx.invocation.principal}")
    candidate_id = candidate_id_for(source_ref, str(args["idempotency_key"]))
    audit.targets(candidate_id)
    evidence: Mapping[str, Any] = args["evidence"]
    trust = asserted_trust(
        str(evidence["evidence_digest"]), ctx.now_instant, payload_digest(effective)
    )
    authorization_digest = authz.decision.receipt.receipt_digest
    ctx.check_before_commit()

    # The key is durable before the transaction opens; a failed transaction leaves an orphan
    # key, which `fresh_key` removes (core/item_keys.py).
    try:
        with item_keys.fresh_key(ctx, candidate_id) as key:
            output = _commit(
                ctx, audit, mutation, key, effective, evidence, trust, authorization_digest
            )
    except ToolError as error:
        replay = steps.replay_after_race(ctx, mutation, error)
        return ToolOutcome.succeeded(_duplicate(audit, replay), audit)
    item_keys.after_commit(ctx)
    return ToolOutcome.succeeded(output, audit)


def _commit(
    ctx: CallContext,
    audit: CallAudit,
    mutation: steps.MutationKey,
    key: item_keys.FreshKey,
    effective: dict[str, Any],
    evidence: Mapping[str, Any],
    trust: dict[str, JsonValue],
    authorization_digest: str,
) -> dict[str, JsonValue]:
    """The capture's one write transaction: event, sealed candidate, result, audit entry."""
    candidate_id = key.item_id
    # Sealed before the transaction: the body does not depend on anything it allocates.
    sealed = key.seal(
        {
            "schema_version": 1,
            "payload": effective,
            "evidence": dict(evidence),
            "authorization_receipt_digest": authorization_digest,
            "trust": trust,
            "recorded_at": ctx.now_instant,
        }
    )
    with ctx.services.database.transaction() as tx:
        # Writes are serialized: a racing same-key call that committed first is final here.
        replay = steps.stored_result(tx, ctx, mutation)
        if replay is not None:
            return _duplicate(audit, replay)
        cursor = journal.head(tx, ctx.scope_ref)[0] + 1
        record = build_record(
            effective,
            recorded_at=ctx.now_instant,
            recorded_cursor=str(cursor),
            authorization_receipt_digest=authorization_digest,
            trust=trust,
        )
        event = journal.append(
            tx,
            ctx.scope_ref,
            event_id=f"capture:{candidate_id}",
            # The candidate id derives from the idempotency key, found new just above.
            unique=True,
            operation="capture",
            target_id=candidate_id,
            fields={
                "digests": {
                    "payload_digest": record["payload_digest"],
                    "record_digest": record["record_digest"],
                },
                "recorded_at": ctx.now_instant,
                "principal_ref": ctx.principal_ref,
                "authorization_receipt_digest": authorization_digest,
            },
        )
        memory.insert_candidate(
            tx,
            ctx.scope_ref,
            memory.CandidateRow(
                candidate_id=candidate_id,
                state="pending",
                principal_ref=ctx.principal_ref,
                payload_digest=str(record["payload_digest"]),
                guard_digest=guard_digest(effective),
                record_digest=str(record["record_digest"]),
                record_id=str(record["record_id"]),
                capture_cursor=event.cursor,
                sealed_body=sealed,
            ),
            ctx.now_ms,
        )
        output: dict[str, JsonValue] = {
            "status": "committed_pending",
            "candidate_id": candidate_id,
            "record_digest": record["record_digest"],
            "cursor": event.cursor_text,
            "transaction_receipt_digest": steps.transaction_receipt_digest(
                ctx, audit, mutation, event.event_hash, event.cursor_text
            ),
        }
        steps.remember_result(tx, ctx, mutation, output)
        steps.audit_in_transaction(tx, ctx, audit)
    return output
