"""`engram_memory_withdraw` and `engram_memory_forget`: confirmed, key-destroying transitions.

Both always need a host confirmation (SPEC §7) and both destroy the item key in the same
transaction as the journal event, so the content is unrecoverable the moment the call commits.
"""

from __future__ import annotations

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import digest
from engram_memory.contract.errors import ErrorCode, ToolError
from engram_memory.contract.lifecycle import next_state
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.policy.decider import AuthzResult
from engram_memory.store import journal, memory
from engram_memory.store.database import Transaction
from engram_memory.tools import indexing, steps
from engram_memory.tools.runtime import CallContext

# Every projection a forget must purge; the coverage receipt names them.
PROJECTIONS = ("lexical_index",)


def _receipt(
    ctx: CallContext,
    authz: AuthzResult,
    event: journal.JournalEvent,
    op_digest: str,
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
            ctx, op_digest, event.event_hash, event.cursor_text
        ),
    }


def withdraw(
    ctx: CallContext, parsed: ParsedArguments, confirmation: object
) -> dict[str, JsonValue]:
    """Raises: ToolError / ProtocolRefusal per SPEC §4.5."""
    candidate_id = str(parsed.arguments["candidate_id"])
    ctx.target_ids.append(candidate_id)
    # SPEC §7: withdraw and forget need confirmation whatever policy data says.
    op_digest, authz = steps.guard_mutation(
        ctx, parsed, confirmation, target=candidate_id, always_confirm=True
    )
    ctx.check_before_commit()
    with ctx.services.database.transaction() as tx:
        # Checked in the write transaction (writes are serialized): a racing call with the
        # same key that committed first is replayed, never refused as ALREADY_TERMINAL.
        replay = steps.stored_result(tx, ctx, op_digest)
        if replay is None:
            output = _commit_withdraw(tx, ctx, parsed, authz, op_digest)
    if replay is not None:
        output = {**replay, "replayed": True}
    return _key_status(output, steps.destroy_key(ctx, candidate_id))


def _commit_withdraw(
    tx: Transaction,
    ctx: CallContext,
    parsed: ParsedArguments,
    authz: AuthzResult,
    op_digest: str,
) -> dict[str, JsonValue]:
    """The withdraw transition, its idempotency result and audit entry, in `tx`.

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
        operation="withdraw",
        target_id=candidate_id,
        fields={
            "digests": {
                "reason_digest": digest("reason", {"reason_ref": parsed.arguments["reason_ref"]})
            },
            "recorded_at": ctx.now_instant,
            "principal_ref": ctx.principal_ref,
        },
    )
    memory.set_candidate_state(tx, ctx.scope_ref, candidate_id, "withdrawn", ctx.now_ms)
    output: dict[str, JsonValue] = {
        "receipt": _receipt(ctx, authz, event, op_digest, ("withdraw", "pending", "withdrawn")),
        "replayed": False,
        "key_destruction": "pending",
    }
    steps.remember_result(tx, ctx, op_digest, output)
    steps.write_audit(tx, ctx, "ok")
    return output


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


def forget(ctx: CallContext, parsed: ParsedArguments, confirmation: object) -> dict[str, JsonValue]:
    """Raises: ToolError / ProtocolRefusal per SPEC §4.6."""
    record_id = str(parsed.arguments["record_id"])
    ctx.target_ids.append(record_id)
    op_digest, authz = steps.guard_mutation(
        ctx, parsed, confirmation, target=record_id, always_confirm=True
    )
    ctx.check_before_commit()
    with ctx.services.database.transaction() as tx:
        # As for withdraw: a racing same-key call that committed first is replayed here.
        replay = steps.stored_result(tx, ctx, op_digest)
        if replay is None:
            output = _commit_forget(tx, ctx, parsed, authz, op_digest)
    if replay is not None:
        output = {**replay, "replayed": True}
    return _coverage(output, record_id, steps.destroy_key(ctx, record_id))


def _commit_forget(
    tx: Transaction,
    ctx: CallContext,
    parsed: ParsedArguments,
    authz: AuthzResult,
    op_digest: str,
) -> dict[str, JsonValue]:
    """The tombstone, the index purge, the idempotency result and audit entry, in `tx`.

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
        operation="tombstone",
        target_id=record_id,
        fields={
            "digests": {
                "record_digest": record.record_digest,
                "reason_digest": digest("reason", {"reason_ref": parsed.arguments["reason_ref"]}),
            },
            "recorded_at": ctx.now_instant,
            "principal_ref": ctx.principal_ref,
        },
    )
    memory.tombstone_record(tx, ctx.scope_ref, record_id, ctx.now_ms)
    indexing.purge_record(tx, ctx, record_id)
    output: dict[str, JsonValue] = {
        "receipt": _receipt(
            ctx, authz, event, op_digest, ("tombstone", record.state, "tombstoned")
        ),
        "replayed": False,
        "projection_invalidation": "pending",
    }
    steps.remember_result(tx, ctx, op_digest, output)
    steps.write_audit(tx, ctx, "ok")
    return output
