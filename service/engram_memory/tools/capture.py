"""`engram_memory_capture`: submit a pending, sealed candidate (SPEC §4.3).

The call is split so that the bulk import (admin/importing.py) runs the same steps: `guard`
(time rules, gate, authorization, idempotency identity), `plan` (retention, reconciliation,
the effective payload and its ids), and `write` (the rows, inside a write transaction the
caller owns). The tool runs them with the key and transaction handling of a single call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.classifiers import texts_by_kind
from engram_memory.contract.digests import (
    candidate_id_for,
    guard_digest,
    one_way_ref,
    payload_digest,
)
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.inputs import check_capture_time_rules
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.contract.types import format_instant, parse_instant
from engram_memory.core import item_keys, steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.mutation import Written, commit_new_item
from engram_memory.core.records import asserted_trust, build_record, effective_payload
from engram_memory.core.runtime import CallContext
from engram_memory.policy.decider import AuthzResult, ClassifierFacts
from engram_memory.store import journal, memory
from engram_memory.store.transaction import Transaction


def classifier_facts(parsed: ParsedArguments) -> ClassifierFacts | None:
    """The names of the scope's content classifiers that match the capture's payload, per
    component kind (None when the scope has none). Names only ever leave this process."""
    if not parsed.classifiers:
        return None
    return parsed.classifiers.classify(texts_by_kind(parsed.arguments["payload"]))


def _resolve_retention(
    ctx: CallContext,
    audit: CallAudit,
    payload: Mapping[str, Any],
    classifiers: ClassifierFacts | None,
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
        classifiers,
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


def duplicate(audit: CallAudit, replay: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """A replay answers with the first result's fields; nothing new is decided or written."""
    candidate_id = str(replay["candidate_id"])
    if candidate_id not in audit.target_ids:
        audit.targets(candidate_id)
    return {**replay, "status": "duplicate_exact"}


@dataclass(frozen=True)
class CapturePlan:
    """Everything a capture decided before its write transaction: the candidate to write."""

    mutation: steps.MutationKey
    candidate_id: str
    effective: dict[str, Any]
    evidence: Mapping[str, Any]
    trust: dict[str, JsonValue]
    authorization_digest: str
    # Of `effective`, made once here, before the write transaction (the bulk import makes
    # plans in its workers): the record's payload digest and the forget guard's digest.
    payload_digest: str
    guard_digest: str

    def envelope(self, ctx: CallContext) -> dict[str, JsonValue]:
        """The candidate's sealed body (rebuilt into the record at admission)."""
        return {
            "schema_version": 1,
            "payload": self.effective,
            "evidence": dict(self.evidence),
            "authorization_receipt_digest": self.authorization_digest,
            "trust": self.trust,
            "recorded_at": ctx.now_instant,
        }


def guard(
    ctx: CallContext, audit: CallAudit, parsed: ParsedArguments, confirmation: object
) -> tuple[steps.MutationKey, AuthzResult]:
    """The capture-time rules, then the mutation's gate, authorization and idempotency
    identity (SPEC §1.8 order).

    Raises:
        ToolError / ProtocolRefusal: per SPEC §4.3 and §1.8.
    """
    check_capture_time_rules(parsed.model, ctx.now_ms)
    return steps.guard_mutation(
        ctx, audit, parsed, confirmation, target=None, classifiers=classifier_facts(parsed)
    )


def plan(
    ctx: CallContext,
    audit: CallAudit,
    parsed: ParsedArguments,
    mutation: steps.MutationKey,
    authz: AuthzResult,
) -> CapturePlan:
    """The capture's own decisions (retention, reconciliation) and the candidate they make.

    Raises:
        ToolError: UNAUTHORIZED when retention or reconciliation is refused.
    """
    args = parsed.arguments
    payload: Mapping[str, Any] = args["payload"]
    expires_at = _resolve_retention(ctx, audit, payload, classifier_facts(parsed))
    _check_reconciliation(ctx, audit, payload)
    effective = effective_payload(payload, ctx.scope_ref, expires_at)
    source_ref = one_way_ref("capture-source", f"{ctx.scope_ref}\0{ctx.invocation.principal}")
    candidate_id = candidate_id_for(source_ref, str(args["idempotency_key"]))
    audit.targets(candidate_id)
    evidence: Mapping[str, Any] = args["evidence"]
    content_digest = payload_digest(effective)
    trust = asserted_trust(str(evidence["evidence_digest"]), ctx.now_instant, content_digest)
    return CapturePlan(
        mutation=mutation,
        candidate_id=candidate_id,
        effective=effective,
        evidence=evidence,
        trust=trust,
        authorization_digest=authz.decision.receipt.receipt_digest,
        payload_digest=content_digest,
        guard_digest=guard_digest(effective),
    )


def capture(
    ctx: CallContext, audit: CallAudit, parsed: ParsedArguments, confirmation: object
) -> ToolOutcome:
    """Run capture after schema validation; returns the output value with the audit facts.

    Raises:
        ToolError / ProtocolRefusal: per SPEC §4.3 and the processing order of §1.8.
    """
    mutation, authz = guard(ctx, audit, parsed, confirmation)
    # SPEC §1.8: idempotency before the operation's own decisions, so a replay decides
    # nothing new; read on a snapshot, outside the writer's lock.
    with ctx.services.database.reading(audit_complete=False) as tx:
        replay = steps.stored_result(tx, ctx, mutation)
        mutation = mutation.absent_in(tx)
    if replay is not None:
        return ToolOutcome.succeeded(duplicate(audit, replay), audit)
    planned = plan(ctx, audit, parsed, mutation, authz)
    committed = commit_new_item(
        ctx,
        audit,
        mutation,
        planned.candidate_id,
        planned.envelope(ctx),
        lambda tx, sealed, _: Written(write(tx, ctx, audit, planned, sealed).output),
    )
    output = duplicate(audit, committed.output) if committed.replayed else committed.output
    if not committed.raced:
        item_keys.after_commit(ctx)
    return ToolOutcome.succeeded(output, audit)


@dataclass(frozen=True)
class WrittenCapture:
    """What `write` put in the transaction: the answer, the candidate row, its record."""

    output: dict[str, JsonValue]
    candidate: memory.CandidateRow
    record: dict[str, JsonValue]


def record_at(ctx: CallContext, planned: CapturePlan, cursor: int) -> dict[str, JsonValue]:
    """The record `planned` becomes when its capture event lands at `cursor` (the cursor is
    in the record, so its digest and id bind it)."""
    return build_record(
        planned.effective,
        recorded_at=ctx.now_instant,
        recorded_cursor=str(cursor),
        authorization_receipt_digest=planned.authorization_digest,
        trust=planned.trust,
        payload_digest_value=planned.payload_digest,
    )


def write(
    tx: Transaction,
    ctx: CallContext,
    audit: CallAudit,
    planned: CapturePlan,
    sealed: bytes,
    built: tuple[int, dict[str, JsonValue]] | None = None,
) -> WrittenCapture:
    """The capture's writes in `tx` (its event, sealed candidate and result); the caller has
    found the key new in `tx` and writes the call's audit entry after this. `built`: a
    (cursor, `record_at` that cursor) made beforehand (the bulk import's workers guess the
    cursor), used only if the event lands at that very cursor.

    Raises:
        StoreUnavailable: a statement failed (the caller's transaction rolls back).
    """
    candidate_id = planned.candidate_id
    cursor = journal.head(tx, ctx.scope_ref)[0] + 1
    if built is not None and built[0] == cursor:
        record = built[1]
    else:
        record = record_at(ctx, planned, cursor)
    event = journal.append(
        tx,
        ctx.scope_ref,
        event_id=f"capture:{candidate_id}",
        # The candidate id derives from the idempotency key, found new by the caller.
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
            "authorization_receipt_digest": planned.authorization_digest,
            **audit.approval_fields(),
        },
    )
    candidate = memory.CandidateRow(
        candidate_id=candidate_id,
        state="pending",
        principal_ref=ctx.principal_ref,
        payload_digest=str(record["payload_digest"]),
        guard_digest=planned.guard_digest,
        record_digest=str(record["record_digest"]),
        record_id=str(record["record_id"]),
        capture_cursor=event.cursor,
        sealed_body=sealed,
    )
    memory.insert_candidate(tx, ctx.scope_ref, candidate, ctx.now_ms)
    output: dict[str, JsonValue] = {
        "status": "committed_pending",
        "candidate_id": candidate_id,
        "record_digest": record["record_digest"],
        "cursor": event.cursor_text,
        "transaction_receipt_digest": steps.transaction_receipt_digest(
            ctx, audit, planned.mutation, event.event_hash, event.cursor_text
        ),
    }
    steps.remember_result(tx, ctx, planned.mutation, output)
    return WrittenCapture(output, candidate, record)
