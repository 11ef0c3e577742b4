"""`engram_memory_withdraw` and `engram_memory_forget`: confirmed, key-destroying transitions.

Both always need a host confirmation (SPEC §7). The transaction that commits the journal event
also promises, durably, the destruction of every key that could open the content; the keys
are destroyed right after COMMIT, on a replay, or at the next start after a crash
(core/item_keys.py). `complete` is reported only once none of those keys remains.
"""

from __future__ import annotations

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import digest
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.lifecycle import next_state
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.core import forgotten, indexing, item_keys, steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.mutation import Written, commit
from engram_memory.core.runtime import CallContext
from engram_memory.policy.decider import AuthzResult
from engram_memory.store import journal, memory
from engram_memory.store.forgotten import ContentDigests
from engram_memory.store.transaction import Transaction

# Every projection a forget must purge; the coverage receipt names them.
PROJECTIONS = ("lexical_index",)


def _receipt(
    ctx: CallContext,
    audit: CallAudit,
    authz: AuthzResult,
    event: journal.JournalEvent,
    mutation: steps.MutationKey,
    transition: tuple[str, str, str],
) -> dict[str, JsonValue]:
    operation, from_state, to_state = transition
    return {
        "event_id": event.event_id,
        "operation": operation,
        "from_state": from_state,
        "to_state": to_state,
        "cursor": event.cursor_text,
        "event_digest": event.event_hash,
        "authorization_receipt_digest": authz.decision.receipt.receipt_digest,
        "transaction_receipt_digest": steps.transaction_receipt_digest(
            ctx, audit, mutation, event.event_hash, event.cursor_text
        ),
    }


def withdraw(
    ctx: CallContext, audit: CallAudit, parsed: ParsedArguments, confirmation: object
) -> ToolOutcome:
    """Raises: ToolError / ProtocolRefusal per SPEC §4.5."""
    candidate_id = str(parsed.arguments["candidate_id"])
    audit.targets(candidate_id)
    # SPEC §7: withdraw and forget need confirmation whatever policy data says.
    mutation, authz = steps.guard_mutation(
        ctx, audit, parsed, confirmation, target=candidate_id, always_confirm=True
    )
    # The stored result is checked in the write transaction: a racing call with the same key
    # that committed first is replayed, never refused as ALREADY_TERMINAL.
    committed = commit(
        ctx, audit, mutation, lambda tx: _commit_withdraw(tx, ctx, audit, parsed, authz, mutation)
    )
    if committed.replayed:
        # Retry the promised destruction; report the truth of the key files now.
        destroyed = item_keys.carry_out(ctx, [candidate_id])
        replayed = _key_status({**committed.output, "replayed": True}, destroyed)
        return ToolOutcome.succeeded(replayed, audit)
    destroyed = item_keys.after_commit(ctx, committed.ended)
    return ToolOutcome.succeeded(_key_status(committed.output, destroyed), audit)


def _commit_withdraw(
    tx: Transaction,
    ctx: CallContext,
    audit: CallAudit,
    parsed: ParsedArguments,
    authz: AuthzResult,
    mutation: steps.MutationKey,
) -> Written:
    """The withdraw transition, its key's promised destruction and its idempotency result,
    in `tx`. Returns the output and the items whose keys `after_commit` destroys.

    Raises:
        ToolError: NOT_FOUND (unknown or foreign), ALREADY_TERMINAL / ILLEGAL_TRANSITION.
    """
    candidate_id = str(parsed.arguments["candidate_id"])
    candidate = memory.get_candidate(tx, ctx.scope_ref, candidate_id)
    if candidate is None:
        raise ToolError(ErrorCode.NOT_FOUND, "candidate unknown or foreign")
    next_state("withdraw", candidate.state)
    event = journal.append(
        tx,
        ctx.scope_ref,
        event_id=f"withdraw:{candidate_id}",
        unique=True,  # next_state above: the candidate is pending, never withdrawn before
        operation="withdraw",
        target_id=candidate_id,
        fields={
            "digests": {
                "reason_digest": digest("reason", {"reason_ref": parsed.arguments["reason_ref"]})
            },
            "recorded_at": ctx.now_instant,
            "principal_ref": ctx.principal_ref,
            **audit.approval_fields(),
        },
    )
    digests = ContentDigests(
        candidate.payload_digest, candidate.guard_digest, candidate.record_digest
    )
    # State, body and keyed digests in one statement; then the key's promised destruction.
    forgotten.forget_candidate(tx, ctx, candidate_id, digests)
    ended = item_keys.end_content(tx, ctx, "withdraw", candidate_id=candidate_id)
    output: dict[str, JsonValue] = {
        "receipt": _receipt(
            ctx, audit, authz, event, mutation, ("withdraw", "pending", "withdrawn")
        ),
        "replayed": False,
        "key_destruction": "pending",
    }
    steps.remember_result(tx, ctx, mutation, output)
    return Written(output, ended)


def _key_status(output: dict[str, JsonValue], destroyed: bool) -> dict[str, JsonValue]:
    """Progress fields report the current truth, on first answers and replays alike."""
    return {**output, "key_destruction": "complete" if destroyed else "pending"}


def _coverage(
    output: dict[str, JsonValue], record_id: str, destroyed: bool
) -> dict[str, JsonValue]:
    """`complete` (with its coverage receipt) only once the index is purged and the key gone."""
    result = {k: v for k, v in output.items() if k != "coverage_receipt_digest"}
    if not destroyed:
        return {**result, "projection_invalidation": "pending"}
    receipt = output["receipt"]
    assert isinstance(receipt, dict)
    coverage = {
        "record_id": record_id,
        "cursor": receipt["cursor"],
        "projections": sorted(PROJECTIONS),
    }
    return {
        **result,
        "projection_invalidation": "complete",
        "coverage_receipt_digest": digest("projection-coverage", coverage),
    }


def forget(
    ctx: CallContext, audit: CallAudit, parsed: ParsedArguments, confirmation: object
) -> ToolOutcome:
    """Raises: ToolError / ProtocolRefusal per SPEC §4.6."""
    record_id = str(parsed.arguments["record_id"])
    audit.targets(record_id)
    mutation, authz = steps.guard_mutation(
        ctx, audit, parsed, confirmation, target=record_id, always_confirm=True
    )
    # As for withdraw: a racing same-key call that committed first is replayed.
    committed = commit(
        ctx, audit, mutation, lambda tx: _commit_forget(tx, ctx, audit, parsed, authz, mutation)
    )
    if committed.replayed:
        # The record's key and its source candidate's key: either could open the content.
        destroyed = item_keys.carry_out(ctx, item_keys.keys_of_record(ctx, record_id))
        replayed = _coverage({**committed.output, "replayed": True}, record_id, destroyed)
        return ToolOutcome.succeeded(replayed, audit)
    destroyed = item_keys.after_commit(ctx, committed.ended)
    return ToolOutcome.succeeded(_coverage(committed.output, record_id, destroyed), audit)


def _commit_forget(
    tx: Transaction,
    ctx: CallContext,
    audit: CallAudit,
    parsed: ParsedArguments,
    authz: AuthzResult,
    mutation: steps.MutationKey,
) -> Written:
    """The tombstone, the index purge, the promised key destructions and the idempotency
    result, in `tx`. Returns the output and the items `after_commit` destroys.

    Raises:
        ToolError: NOT_FOUND (unknown or foreign), ALREADY_TERMINAL / ILLEGAL_TRANSITION.
    """
    record_id = str(parsed.arguments["record_id"])
    record = memory.get_record(tx, ctx.scope_ref, record_id)
    if record is None:
        raise ToolError(ErrorCode.NOT_FOUND, "record unknown or foreign")
    next_state("tombstone", record.state)
    event = journal.append(
        tx,
        ctx.scope_ref,
        event_id=f"tombstone:{record_id}",
        unique=True,  # next_state above: a tombstoned record is terminal
        operation="tombstone",
        target_id=record_id,
        fields={
            "digests": {
                "record_digest": record.record_digest,
                "reason_digest": digest("reason", {"reason_ref": parsed.arguments["reason_ref"]}),
            },
            "recorded_at": ctx.now_instant,
            "principal_ref": ctx.principal_ref,
            **audit.approval_fields(),
        },
    )
    indexing.purge_record(tx, ctx, record_id)
    ended = item_keys.end_content(tx, ctx, "tombstone", record_id=record_id)
    source = ended[0] if len(ended) > 1 else None  # [its source candidate, the record]
    digests = ContentDigests(record.payload_digest, record.guard_digest, record.record_digest)
    # Tombstone, body and keyed digests in one statement (and the source candidate's digests).
    forgotten.forget_record(tx, ctx, record_id, source, digests)
    output: dict[str, JsonValue] = {
        "receipt": _receipt(
            ctx, audit, authz, event, mutation, ("tombstone", record.state, "tombstoned")
        ),
        "replayed": False,
        "projection_invalidation": "pending",
    }
    steps.remember_result(tx, ctx, mutation, output)
    return Written(output, ended)
