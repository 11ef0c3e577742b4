"""`engram_memory_request_admission`: the admission policy decides a candidate (SPEC §4.4)."""

from __future__ import annotations

from typing import Any

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import digest, with_digest
from engram_memory.contract.errors import ErrorCode, ToolError
from engram_memory.contract.lifecycle import next_state
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.contract.types import format_instant, parse_instant
from engram_memory.policy.decider import AdmissionCandidate, AdmissionResult
from engram_memory.store import journal, memory
from engram_memory.store.database import Transaction
from engram_memory.tools import indexing, item_keys, steps
from engram_memory.tools.records import build_record
from engram_memory.tools.runtime import CallContext


def rebuild_record(envelope: dict[str, Any], capture_cursor: int) -> dict[str, JsonValue]:
    return build_record(
        envelope["payload"],
        recorded_at=str(envelope["recorded_at"]),
        recorded_cursor=str(capture_cursor),
        authorization_receipt_digest=str(envelope["authorization_receipt_digest"]),
        trust=envelope["trust"],
    )


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
    ctx: CallContext, parsed: ParsedArguments, confirmation: object
) -> dict[str, JsonValue]:
    """Raises: ToolError / ProtocolRefusal per SPEC §4.4."""
    args = parsed.arguments
    candidate_id = str(args["candidate_id"])
    ctx.target_ids.append(candidate_id)
    op_digest, _ = steps.guard_mutation(ctx, parsed, confirmation, target=candidate_id)
    with ctx.services.database.reading() as tx:
        replay = steps.stored_result(tx, ctx, op_digest)
        if replay is not None:
            return {**replay, "replayed": True}
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
    ctx.record(result.receipt)
    decision = _decision_object(result)
    outcome = result.decision
    if outcome == "accept" and guard_hit:
        # Forgotten content may not come back silently: it looks exactly like adjudication.
        outcome = "adjudication_required"
    # Outside the writer's critical section: a large record's terms take long to key.
    prepared = indexing.record_index(ctx, record) if outcome == "accept" else None
    ctx.check_before_commit()

    if outcome == "accept":
        # The record's key is durable before the transaction opens (tools/item_keys.py).
        try:
            with item_keys.fresh_key(ctx, str(record["record_id"])) as key:
                sealed = key.seal(record)
                output = _commit(
                    ctx, candidate, record, decision, outcome, op_digest, sealed, prepared
                )
        except ToolError as error:
            return {**steps.replay_after_race(ctx, op_digest, error), "replayed": True}
    else:
        output = _commit(ctx, candidate, record, decision, outcome, op_digest, None, None)
    # Accept and reject end the candidate: its pending key goes (SPEC §4.4).
    item_keys.after_commit(ctx, [] if outcome == "adjudication_required" else [candidate_id])
    return output


def _commit(
    ctx: CallContext,
    candidate: memory.CandidateRow,
    record: dict[str, JsonValue],
    decision: dict[str, JsonValue],
    outcome: str,
    op_digest: str,
    sealed_record: bytes | None,
    prepared: indexing.RecordIndex | None,
) -> dict[str, JsonValue]:
    """The admission's write transaction: the decision (if it ends the candidate), the
    idempotency result and the audit entry."""
    with ctx.services.database.transaction() as tx:
        # A racing call with the same key may have committed since the read above; writes
        # are serialized, so its stored result is final here and is replayed, never refused.
        replay = steps.stored_result(tx, ctx, op_digest)
        if replay is not None:
            return {**replay, "replayed": True}
        current = memory.get_candidate(tx, ctx.scope_ref, candidate.candidate_id)
        if current is None or current.state != "pending":
            raise ToolError(ErrorCode.NOT_FOUND, "candidate changed concurrently")
        if outcome == "adjudication_required":
            outcome_body = _pending_outcome(candidate, decision)
        else:
            outcome_body = _commit_decision(
                tx, ctx, candidate, record, decision, outcome, op_digest, sealed_record, prepared
            )
        output: dict[str, JsonValue] = {"outcome": outcome_body, "replayed": False}
        steps.remember_result(tx, ctx, op_digest, output)
        steps.write_audit(tx, ctx, "ok")
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
    candidate: memory.CandidateRow,
    record: dict[str, JsonValue],
    decision: dict[str, JsonValue],
    outcome: str,
    op_digest: str,
    sealed_record: bytes | None,
    prepared: indexing.RecordIndex | None,
) -> dict[str, JsonValue]:
    operation = "accept" if outcome == "accept" else "reject"
    event = conclude_admission(
        tx,
        ctx,
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
            ctx, op_digest, event.event_hash, event.cursor_text
        ),
    }
    if operation == "accept":
        body["record_id"] = record["record_id"]
    return body


def conclude_admission(
    tx: Transaction,
    ctx: CallContext,
    candidate: memory.CandidateRow,
    record: dict[str, JsonValue],
    operation: str,
    fields: dict[str, JsonValue],
    sealed_record: bytes | None,
    prepared_index: indexing.RecordIndex | None = None,
) -> journal.JournalEvent:
    """Journal the accept or reject of a pending candidate, promote it on accept, end it.

    Shared by policy admission and host adjudication, which differ only in the event
    `fields` naming who decided and why. On accept, `sealed_record` is the record sealed
    under its own new key (`item_keys.fresh_key`) and `prepared_index` (see `promote`) keeps
    term keying out of the transaction. Either way the candidate's body is cleared and its
    key's destruction promised here; the caller carries it out after COMMIT
    (`item_keys.after_commit` with the candidate's id).

    Raises:
        ToolError: ALREADY_TERMINAL / ILLEGAL_TRANSITION from the lifecycle table.
        ValueError: an accept without a sealed record (a programming error).
    """
    to_state = next_state(operation, candidate.state)
    body: dict[str, JsonValue] = {**fields, "recorded_at": ctx.now_instant}
    if operation == "accept":
        # Links the candidate's history to the record's for auditors (ids only).
        body["record_id"] = record["record_id"]
    event = journal.append(
        tx,
        ctx.scope_ref,
        event_id=f"admission:{candidate.candidate_id}",
        operation=operation,
        target_id=candidate.candidate_id,
        fields=body,
    )
    if operation == "accept":
        if sealed_record is None:
            raise ValueError("an accepted record must be sealed under its own key")
        promote(tx, ctx, candidate, record, event.cursor, sealed_record, prepared_index)
    memory.set_candidate_state(tx, ctx.scope_ref, candidate.candidate_id, to_state, ctx.now_ms)
    # The promoted record is the only way left to open the content (issue 7, item 1).
    item_keys.end_content(tx, ctx, operation, candidate_id=candidate.candidate_id)
    return event


def promote(
    tx: Transaction,
    ctx: CallContext,
    candidate: memory.CandidateRow,
    record: dict[str, JsonValue],
    accept_cursor: int,
    sealed_record: bytes,
    prepared_index: indexing.RecordIndex | None = None,
) -> None:
    """Insert the accepted record, sealed under its own new key, and index it (SPEC §4.4).

    Shared by policy admission and host adjudication, so both promote identically; the index
    entries are computed here unless the caller computed them before the transaction.
    """
    record_id = str(record["record_id"])
    ctx.target_ids.append(record_id)
    payload: Any = record
    valid_time = payload["valid_time"]
    expires = payload["retention"].get("expires_at")
    memory.insert_record(
        tx,
        ctx.scope_ref,
        candidate.candidate_id,
        memory.RecordRow(
            record_id=record_id,
            state="accepted_current",
            record_digest=candidate.record_digest,
            payload_digest=candidate.payload_digest,
            guard_digest=candidate.guard_digest,
            recorded_cursor=candidate.capture_cursor,
            accept_cursor=accept_cursor,
            valid_t=int(valid_time["t"]),
            valid_t_end=None if "t_end" not in valid_time else int(valid_time["t_end"]),
            expires_at_ms=None if expires is None else parse_instant(str(expires)),
            sealed_body=sealed_record,
        ),
        ctx.now_ms,
    )
    indexing.index_record(tx, ctx, record, prepared_index)
