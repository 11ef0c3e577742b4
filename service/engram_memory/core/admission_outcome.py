"""Concluding a pending candidate: journal its accept or reject, promote it on accept.

Shared by policy admission (tools/admission.py) and host adjudication (admin/maintenance.py),
which differ only in who decided and why; both promote and end the candidate identically.
"""

from __future__ import annotations

from typing import Any

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.lifecycle import next_state
from engram_memory.contract.types import parse_instant
from engram_memory.core import indexing, item_keys
from engram_memory.core.call_audit import CallAudit
from engram_memory.core.records import build_record
from engram_memory.core.runtime import CallContext
from engram_memory.store import journal, key_intents, memory
from engram_memory.store.transaction import Transaction


def rebuild_record(envelope: dict[str, Any], capture_cursor: int) -> dict[str, JsonValue]:
    return build_record(
        envelope["payload"],
        recorded_at=str(envelope["recorded_at"]),
        recorded_cursor=str(capture_cursor),
        authorization_receipt_digest=str(envelope["authorization_receipt_digest"]),
        trust=envelope["trust"],
    )


def conclude_admission(
    tx: Transaction,
    ctx: CallContext,
    audit: CallAudit,
    candidate: memory.CandidateRow,
    record: dict[str, JsonValue],
    operation: str,
    fields: dict[str, JsonValue],
    sealed_record: bytes | None,
    prepared_index: indexing.RecordIndex | indexing.StagedIndex | None = None,
) -> journal.JournalEvent:
    """Journal the accept or reject of a pending candidate, promote it on accept, end it.

    Shared by policy admission and host adjudication, which differ only in the event
    `fields` naming who decided and why. On accept, `sealed_record` is the record sealed
    under its own new key (`item_keys.fresh_key`) and `prepared_index` (see `promote`) keeps
    term keying out of the transaction. Either way the candidate's body is cleared and its
    key's destruction promised here; the caller carries it out after COMMIT
    (`item_keys.after_commit` with the candidate's id). An accepted record's id joins the
    call's target ids in `audit`.

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
        unique=True,  # next_state above: the candidate is pending, so never admitted before
        operation=operation,
        target_id=candidate.candidate_id,
        fields=body,
    )
    if operation == "accept":
        if sealed_record is None:
            raise ValueError("an accepted record must be sealed under its own key")
        promote(tx, ctx, audit, candidate, record, event.cursor, sealed_record, prepared_index)
    # The promoted record is the only way left to open the content (issue 7, item 1).
    key_intents.end_candidate(tx, ctx.scope_ref, candidate.candidate_id, to_state, ctx.now_ms)
    item_keys.end_content(tx, ctx, operation, candidate_id=candidate.candidate_id)
    return event


def promote(
    tx: Transaction,
    ctx: CallContext,
    audit: CallAudit,
    candidate: memory.CandidateRow,
    record: dict[str, JsonValue],
    accept_cursor: int,
    sealed_record: bytes,
    prepared_index: indexing.RecordIndex | indexing.StagedIndex | None = None,
) -> None:
    """Insert the accepted record, sealed under its own new key, and index it (SPEC §4.4).

    Shared by policy admission and host adjudication, so both promote identically; the index
    entries are computed here unless the caller computed them before the transaction, and
    written here unless the caller staged them (`indexing.staged_index`: a `StagedIndex`).
    """
    record_id = str(record["record_id"])
    audit.targets(record_id)
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
