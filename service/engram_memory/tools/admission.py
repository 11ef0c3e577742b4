"""`engram_memory_request_admission`: the admission policy decides a candidate (SPEC §4.4)."""

from __future__ import annotations

from typing import Any

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import digest, with_digest
from engram_memory.contract.errors import ErrorCode, ToolError
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.contract.types import format_instant
from engram_memory.core import indexing, item_keys, steps
from engram_memory.core.admission_outcome import conclude_admission, rebuild_record
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.runtime import CallContext
from engram_memory.policy.decider import AdmissionCandidate, AdmissionResult
from engram_memory.store import memory
from engram_memory.store.database import Transaction


def _admission_candidate(
    candidate: memory.CandidateRow, envelope: dict[str, Any]
) -> AdmissionCandidate:
    payload, evidence = envelope["payload"], envelope["evidence"]
    return AdmissionCandidate(
        candidate_id=candidate.candidate_id,
        payload_digest=candidate.payload_digest,
        record_digest=candidate.record_digest,
        evidence_ref=str(evidence["evidence_ref"]),
        evidence_digest=str(evidence["evidence_digest"]),
        component_kinds=tuple(str(c["kind"]) for c in payload["components"]),
        citation_count=len(payload["citations"]),
        source_refs=tuple(sorted({str(c["source_ref"]) for c in payload["citations"]})),
        has_attestation="attestation" in evidence,
        trust_class=str(envelope["trust"]["class"]),
    )


def _decision_object(result: AdmissionResult) -> dict[str, JsonValue]:
    return with_digest(
        "admission-decision",
        {
            "policy_id": result.policy_id,
            "policy_version": result.policy_version,
            "record_digest": result.record_digest,
            "decision": result.decision,
            "issued_at": format_instant(result.issued_at_ms),
        },
    )


def request_admission(
    ctx: CallContext, audit: CallAudit, parsed: ParsedArguments, confirmation: object
) -> ToolOutcome:
    """Raises: ToolError / ProtocolRefusal per SPEC §4.4."""
    args = parsed.arguments
    candidate_id = str(args["candidate_id"])
    audit.targets(candidate_id)
    mutation, _ = steps.guard_mutation(ctx, audit, parsed, confirmation, target=candidate_id)
    with ctx.services.database.reading() as tx:
        replay = steps.stored_result(tx, ctx, mutation)
        if replay is not None:
            return ToolOutcome.succeeded({**replay, "replayed": True}, audit)
        mutation = mutation.absent_in(tx)
        candidate = memory.get_candidate(tx, ctx.scope_ref, candidate_id)
        if candidate is None or candidate.state != "pending":
            raise ToolError(ErrorCode.NOT_FOUND, "candidate unknown, foreign or not pending")
        envelope = steps.open_item(ctx, candidate_id, candidate.sealed_body)
        record = rebuild_record(envelope, candidate.capture_cursor)
        if record["record_digest"] != candidate.record_digest:
            raise ToolError(ErrorCode.JOURNAL_CORRUPT, "rebuilt record digest differs")
        existing = memory.get_record(tx, ctx.scope_ref, candidate.record_id)
        if existing is not None and existing.state == "tombstoned":
            raise ToolError(ErrorCode.ALREADY_TERMINAL, "record already tombstoned")
        guard_hit = memory.matches_tombstoned_content(
            tx, ctx.scope_ref, candidate.payload_digest, candidate.guard_digest
        )

    result = ctx.services.decider.admission(
        ctx.subject, _admission_candidate(candidate, envelope), ctx.now_ms
    )
    audit.decided(result.receipt)
    decision = _decision_object(result)
    outcome = result.decision
    if outcome == "accept" and guard_hit:
        # Forgotten content may not come back silently: it looks exactly like adjudication.
        outcome = "adjudication_required"
    # Outside the writer's critical section: a large record's terms take long to key.
    prepared = indexing.record_index(ctx, record) if outcome == "accept" else None
    ctx.check_before_commit()

    if outcome == "accept":
        # The record's key is durable before the transaction opens (core/item_keys.py).
        try:
            with item_keys.fresh_key(ctx, str(record["record_id"])) as key:
                sealed = key.seal(record)
                assert prepared is not None  # computed above for every accept
                # The postings commit on their own, outside the writer's lock (issue 7, item 6).
                with indexing.staged_index(ctx, prepared) as staged:
                    output = _commit(
                        ctx, audit, candidate, record, decision, outcome, mutation, sealed, staged
                    )
        except ToolError as error:
            replay = steps.replay_after_race(ctx, mutation, error)
            return ToolOutcome.succeeded({**replay, "replayed": True}, audit)
    else:
        output = _commit(ctx, audit, candidate, record, decision, outcome, mutation, None, None)
    # Accept and reject end the candidate: its pending key goes (SPEC §4.4).
    item_keys.after_commit(ctx, [] if outcome == "adjudication_required" else [candidate_id])
    return ToolOutcome.succeeded(output, audit)


def _commit(
    ctx: CallContext,
    audit: CallAudit,
    candidate: memory.CandidateRow,
    record: dict[str, JsonValue],
    decision: dict[str, JsonValue],
    outcome: str,
    mutation: steps.MutationKey,
    sealed_record: bytes | None,
    prepared: indexing.RecordIndex | indexing.StagedIndex | None,
) -> dict[str, JsonValue]:
    """The admission's write transaction: the decision (if it ends the candidate), the
    idempotency result and the audit entry."""
    with ctx.services.database.transaction() as tx:
        # A racing call with the same key may have committed since the read above; writes
        # are serialized, so its stored result is final here and is replayed, never refused.
        replay = steps.stored_result(tx, ctx, mutation)
        if replay is not None:
            return {**replay, "replayed": True}
        current = memory.get_candidate(tx, ctx.scope_ref, candidate.candidate_id)
        if current is None or current.state != "pending":
            raise ToolError(ErrorCode.NOT_FOUND, "candidate changed concurrently")
        if outcome == "adjudication_required":
            outcome_body = _pending_outcome(candidate, decision)
        else:
            outcome_body = _commit_decision(
                tx,
                ctx,
                audit,
                candidate,
                record,
                decision,
                outcome,
                mutation,
                sealed_record,
                prepared,
            )
        output: dict[str, JsonValue] = {"outcome": outcome_body, "replayed": False}
        steps.remember_result(tx, ctx, mutation, output)
        steps.audit_in_transaction(tx, ctx, audit)
    return output


def _pending_outcome(
    candidate: memory.CandidateRow, decision: dict[str, JsonValue]
) -> dict[str, JsonValue]:
    cursor = str(candidate.capture_cursor)
    decision_digest = str(decision["receipt_digest"])
    return {
        "status": "pending_adjudication",
        "candidate_id": candidate.candidate_id,
        "cursor": cursor,
        "decision_receipt_digest": decision_digest,
        "transaction_receipt_digest": digest(
            "admission-pending",
            {
                "candidate_id": candidate.candidate_id,
                "cursor": cursor,
                "decision_receipt_digest": decision_digest,
            },
        ),
    }


def _commit_decision(
    tx: Transaction,
    ctx: CallContext,
    audit: CallAudit,
    candidate: memory.CandidateRow,
    record: dict[str, JsonValue],
    decision: dict[str, JsonValue],
    outcome: str,
    mutation: steps.MutationKey,
    sealed_record: bytes | None,
    prepared: indexing.RecordIndex | indexing.StagedIndex | None,
) -> dict[str, JsonValue]:
    operation = "accept" if outcome == "accept" else "reject"
    event = conclude_admission(
        tx,
        ctx,
        audit,
        candidate,
        record,
        operation,
        {
            "digests": {
                "record_digest": candidate.record_digest,
                "decision_receipt_digest": decision["receipt_digest"],
            },
            "principal_ref": ctx.principal_ref,
        },
        sealed_record,
        prepared_index=prepared,
    )
    body: dict[str, JsonValue] = {
        "status": "accepted" if operation == "accept" else "rejected",
        "candidate_id": candidate.candidate_id,
        "cursor": event.cursor_text,
        "decision_receipt_digest": decision["receipt_digest"],
        "transaction_receipt_digest": steps.transaction_receipt_digest(
            ctx, audit, mutation, event.event_hash, event.cursor_text
        ),
    }
    if operation == "accept":
        body["record_id"] = record["record_id"]
    return body
