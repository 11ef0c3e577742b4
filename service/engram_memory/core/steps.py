"""Steps every tool shares: authorize, gate, guard mutations, seal and open bodies, audit.

Each step either returns what the next one needs or raises a `ToolError` with the contract's
code; none of them swallows a failure.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from engram_memory.contract.canonical import JsonValue, canonical_text
from engram_memory.contract.digests import digest, one_way_ref
from engram_memory.contract.errors import ErrorCode, ProtocolCode
from engram_memory.contract.exceptions import (
    KeyFileBroken,
    ProtocolRefusal,
    SealBroken,
    TokenInvalid,
    ToolError,
)
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.core.call_audit import AuditFacts, CallAudit, ConfirmationSpend
from engram_memory.core.decision_keeping import kept_decisions
from engram_memory.core.runtime import CallContext
from engram_memory.crypto.sealing import open_sealed
from engram_memory.host.confirmation import ConfirmationBinding, verify_confirmation
from engram_memory.policy.decider import AuthzResult, ClassifierFacts, RateLimit
from engram_memory.store import audit, memory
from engram_memory.store.audit import ApprovalEvidence
from engram_memory.store.transaction import Transaction

log = logging.getLogger("engram_memory.calls")


def authorize(
    ctx: CallContext, audit: CallAudit, classifiers: ClassifierFacts | None = None
) -> AuthzResult:
    """Base authorization for the tool in the bound scope; its receipt goes to `audit`.
    (Rate limits apply earlier, from the discovery decision: `admit_rate`.) `classifiers`:
    `{}` for a read in a scope that classifies (tools/record_redaction.py).

    Raises:
        ToolError: UNAUTHORIZED when policy denies; POLICY_* from the decider.
    """
    result = ctx.services.decider.authz(ctx.subject, ctx.tool, classifiers)
    audit.decided(result.decision)
    if not result.allow:
        raise ToolError(ErrorCode.UNAUTHORIZED, "authz denied")
    return result


def admit_rate(ctx: CallContext, limits: Sequence[RateLimit]) -> None:
    """Count the call against the rate-limit rules that apply to it (SPEC §12), before its
    arguments are validated: a storm of malformed calls is limited like any other.

    Raises:
        ToolError: RATE_LIMITED when one of the caller's limits is exhausted.
    """
    exhausted = ctx.services.rate_limiter.admit(
        ctx.scope_ref, ctx.invocation.principal, limits, ctx.now_ms
    )
    if exhausted is not None:
        raise ToolError(ErrorCode.RATE_LIMITED, f"rate limit {exhausted}")


def pass_confirmation_gate(
    ctx: CallContext,
    audit: CallAudit,
    token: object,
    *,
    target: str,
    op_digest: str,
    required: bool,
    ttl_s: int,
) -> None:
    """Verify a host confirmation where one is required (SPEC §7); `audit` spends it.

    The `jti` is checked on a snapshot here and consumed in the transaction that writes the
    call's audit entry: the call's own write transaction, or the entry point's for any other
    outcome. So it is spent whatever the outcome, without a transaction of its own.

    Raises:
        ProtocolRefusal: -32603 when a required confirmation reference is absent.
        ToolError: gate_failed when present but invalid, expired, reused or mis-bound.
    """
    if not required:
        return
    if token is None:
        raise ProtocolRefusal(ProtocolCode.CONTEXT_UNAVAILABLE, "confirmation missing")
    binding = ConfirmationBinding(
        cap=ctx.tool,
        target=target,
        op=op_digest,
        session=ctx.invocation.session,
        principal=ctx.invocation.principal,
    )
    try:
        verified = verify_confirmation(
            token, ctx.services.host_keys, binding, max_ttl_s=ttl_s, now_s=ctx.now_ms / 1000
        )
    except TokenInvalid as exc:
        raise ToolError(ErrorCode.gate_failed, f"confirmation refused: {exc}") from exc
    approval = ctx.services.decider.approval(
        ctx.subject, ctx.tool, verified.approver, verified.approver_groups
    )
    audit.decided(approval.decision)
    if not approval.approved:
        # The rule names are policy text, never the approver: the audit row already binds
        # the approval decision's receipt, whose input names who it was.
        rules = ",".join(approval.refused_by) or "none"
        raise ToolError(ErrorCode.gate_failed, f"approval refused by rule {rules}")
    with ctx.services.database.reading(audit_complete=False) as tx:
        if memory.confirmation_used(tx, verified.jti):
            raise ToolError(ErrorCode.gate_failed, "confirmation already used")
        evidence = ApprovalEvidence(
            approver=verified.approver,
            jti=verified.jti,
            issued_at_s=verified.issued_at_s,
            resolved_at_s=verified.resolved_at_s,
            op_digest=verified.op,
        )
        audit.confirmed(ConfirmationSpend(evidence, tx.generation))


@dataclass(frozen=True)
class MutationKey:
    """A mutation's idempotency identity: its operation digest and its key's digest.

    `absent_at` is the generation of a snapshot that found no result for it (store/
    published.py): a later lookup reads the store again only if a commit since wrote it.
    """

    op_digest: str
    key_digest: str
    absent_at: int | None = None

    def absent_in(self, snapshot: Transaction) -> MutationKey:
        """This key, known to have had no result in `snapshot`."""
        return replace(self, absent_at=snapshot.generation)


def guard_mutation(
    ctx: CallContext,
    audit: CallAudit,
    parsed: ParsedArguments,
    confirmation: object,
    *,
    target: str | None,
    always_confirm: bool = False,
    classifiers: ClassifierFacts | None = None,
) -> tuple[MutationKey, AuthzResult]:
    """The steps every mutation takes, in SPEC §1.8 order: confirmation gate, base
    authorization, idempotency identity. Returns (idempotency identity, authorization); the
    decisions and the key digest go to `audit`.

    `target` None binds the confirmation to the operation digest itself (capture);
    `classifiers` are the names the call's content matched (capture), for the decision.

    Raises:
        ProtocolRefusal / ToolError: from the gate or the authorization.
    """
    op_digest = parsed.operation_digest(ctx.tool)
    need = ctx.services.decider.confirmation(ctx.subject, ctx.tool, classifiers)
    audit.decided(need.decision)
    pass_confirmation_gate(
        ctx,
        audit,
        confirmation,
        target=op_digest if target is None else target,
        op_digest=op_digest,
        required=always_confirm or need.required,
        ttl_s=need.ttl_seconds,
    )
    authz = authorize(ctx, audit)
    key = MutationKey(op_digest, idempotency_key_digest(str(parsed.arguments["idempotency_key"])))
    audit.keyed(key.key_digest)
    return key, authz


def idempotency_key_digest(key: str) -> str:
    return one_way_ref("idempotency-key", key)


def stored_result(
    tx: Transaction, ctx: CallContext, key: MutationKey
) -> dict[str, JsonValue] | None:
    """The first result of this (scope, principal, key), or None if the key is new.

    Raises:
        ToolError: DIGEST_CONFLICT when the key is bound to another operation.
    """
    row = memory.get_idempotency(
        tx, ctx.scope_ref, ctx.principal_ref, key.key_digest, absent_at=key.absent_at
    )
    if row is None:
        return None
    if row.tool != ctx.tool or row.operation_digest != key.op_digest:
        raise ToolError(ErrorCode.DIGEST_CONFLICT, "idempotency key bound elsewhere")
    result: dict[str, JsonValue] = json.loads(row.result_json)
    return result


def replay_after_race(ctx: CallContext, key: MutationKey, error: ToolError) -> dict[str, JsonValue]:
    """The stored first result when `error` is MUTATION_OUTCOME_UNKNOWN because a racing
    call with the same key held or committed the item meanwhile (`item_keys.fresh_key`).

    Racing same-key calls get the replay once the first committed (issue 7, item 5); while
    it is still in flight, MUTATION_OUTCOME_UNKNOWN stands and a retry will replay.

    Raises:
        ToolError: `error` itself, unless a committed result of this key exists now.
    """
    if error.code is not ErrorCode.MUTATION_OUTCOME_UNKNOWN:
        raise error
    with ctx.services.database.reading(audit_complete=False) as tx:
        replay = stored_result(tx, ctx, key)
    if replay is None:
        raise error
    return replay


def remember_result(
    tx: Transaction, ctx: CallContext, key: MutationKey, result: Mapping[str, JsonValue]
) -> None:
    memory.put_idempotency(
        tx,
        ctx.scope_ref,
        ctx.principal_ref,
        key.key_digest,
        tool=ctx.tool,
        operation_digest=key.op_digest,
        result_json=canonical_text(dict(result)),
        now_ms=ctx.now_ms,
    )


def open_item(ctx: CallContext, item_id: str, sealed: bytes | None) -> dict[str, JsonValue]:
    """Open a sealed body of this scope.

    Raises:
        ToolError: BLOB_MISSING when the body or its key is gone or does not open.
    """
    try:
        data_key = ctx.services.keys.load_item_key(ctx.services.root_key, ctx.scope_ref, item_id)
    except KeyFileBroken as exc:
        # Tampered, foreign, or wrapped under a root this service was not given.
        log.error("item key file does not open tool=%s", ctx.tool)
        raise ToolError(ErrorCode.BLOB_MISSING, "item key does not open") from exc
    if sealed is None or data_key is None:
        raise ToolError(ErrorCode.BLOB_MISSING, "sealed body or item key missing")
    try:
        body: dict[str, JsonValue] = json.loads(
            open_sealed(data_key, sealed, ctx.scope_ref, item_id)
        )
    except (SealBroken, ValueError) as exc:
        raise ToolError(ErrorCode.BLOB_MISSING, "sealed body does not open") from exc
    return body


def transaction_receipt_digest(
    ctx: CallContext, audit: CallAudit, key: MutationKey, event_hash: str, cursor: str
) -> str:
    """Binds the committed event to the receipts of every decision the call made so far."""
    return digest(
        "tool-transaction",
        {
            "tool": ctx.tool,
            "operation_digest": key.op_digest,
            "cursor": cursor,
            "event_hash": event_hash,
            "decision_receipt_digests": [d.receipt.receipt_digest for d in audit.decisions],
        },
    )


def audit_in_transaction(
    tx: Transaction, ctx: CallContext, audit: CallAudit, outcome: str = "ok", detail: str = ""
) -> AuditFacts:
    """Write the call's audit entry in its own write transaction `tx`, as its last statement,
    so the entry commits with the write or not at all; `audit` remembers that it did, so the
    entry point writes no second entry whatever happens next. Returns the facts written.

    Raises:
        ToolError: gate_failed when a racing call consumed the call's confirmation since
            the gate passed (the transaction rolls back).
        StoreUnavailable: the entry could not be appended (the caller's transaction rolls
            back; the entry point still audits the failure).
    """
    facts = audit.facts(outcome, detail)
    (written,) = write_audits(tx, [(ctx, facts)])
    if written.outcome != facts.outcome:
        # Its confirmation was consumed since the gate's snapshot: nothing of this commits.
        raise ToolError(ErrorCode.gate_failed, "confirmation already used")
    audit.wrote(facts)
    return facts


def write_audit(tx: Transaction, ctx: CallContext, facts: AuditFacts) -> None:
    """Append the audit entry of the call bound in `ctx` with `facts`, in `tx` (the call
    fails if this fails).

    Raises:
        StoreUnavailable: a statement failed (the caller's transaction rolls back).
    """
    write_audits(tx, [(ctx, facts)])


def write_audits(
    tx: Transaction,
    entries: Sequence[tuple[CallContext, AuditFacts]],
    extra: Sequence[audit.AuditRecord] = (),
) -> list[AuditFacts]:
    """Append the entries of several calls in order, in `tx`, with two statements (a group
    commit), spending the confirmation each call's gate passed; then the `extra` entries
    made without a call (host stream, refusal summaries: core/refusal_stream.py).

    A confirmation is single use (SPEC §7): an entry whose confirmation another call consumed
    since its gate passed (or an earlier entry of this group did) is written, and returned, as
    `gate_failed` instead of its outcome. Returns the facts written, in order.

    Raises:
        StoreUnavailable: a statement failed (the caller's transaction rolls back).
    """
    written: list[AuditFacts] = []
    spent: set[str] = set()
    for ctx, facts in entries:
        spend = facts.confirmation
        if spend is not None:
            if spend.jti in spent or memory.confirmation_used(
                tx, spend.jti, unused_at=spend.unused_at
            ):
                facts = replace(
                    facts,
                    outcome=ErrorCode.gate_failed.name,
                    detail="confirmation already used",
                    confirmation=None,
                )
            else:
                memory.consume_confirmation(tx, spend.jti, ctx.scope_ref, ctx.tool, ctx.now_ms)
                spent.add(spend.jti)
        written.append(facts)
    records = [audit_record(ctx, facts) for (ctx, _), facts in zip(entries, written, strict=True)]
    audit.append_all(tx, [*records, *extra])
    return written


def audit_record(ctx: CallContext, facts: AuditFacts) -> audit.AuditRecord:
    """A call's audit entry, as `write_audits` and the call log (core/audit_writer.py) write it."""
    # The revision the call's decisions bound (all one: PolicyDecider.one_revision_per_call);
    # a group commit may write this entry on another call's thread, after a rollout.
    decided = next((d.receipt for d in facts.decisions), None)
    expected = ctx.services.decider.expected
    revision, bundle_digest = (
        (decided.bundle_revision, decided.bundle_digest)
        if decided is not None
        else (expected.revision, expected.digest)
    )
    return audit.AuditRecord(
        recorded_at=ctx.now_instant,
        audit_id=ctx.invocation.audit_id,
        scope_ref=ctx.scope_ref,
        principal_ref=ctx.principal_ref,
        agent_ref=ctx.agent_ref,
        session_ref=ctx.session_ref,
        tool=ctx.tool,
        outcome=facts.outcome,
        bundle_digest=bundle_digest,
        bundle_revision=revision,
        target_ids=facts.target_ids,
        receipts=tuple(d.receipt for d in facts.decisions),
        idempotency_key_digest=facts.idempotency_key_digest,
        detail=facts.detail,
        approval=None if facts.confirmation is None else facts.confirmation.approval,
        audit_id_kept_until_ms=ctx.audit_id_kept_until_ms,
        kept_decisions=kept_decisions(
            facts.decisions, ctx.services.settings.decision_input_retention_days
        ),
    )


def destroy_key(ctx: CallContext, item_id: str) -> bool:
    """Crypto-shred an item after its terminal transition committed; True once irrecoverable.

    Runs after COMMIT on purpose: destroying first and then failing to commit would leave a
    live record that can never be read again. The commit promised it durably
    (core/item_keys.py), so a crash before this runs does not lose the destruction.
    """
    destroyed = ctx.services.keys.destroy(ctx.scope_ref, item_id)
    if not destroyed:
        log.error("key destruction pending tool=%s", ctx.tool)
    return destroyed
