"""Host-only maintenance: adjudication and record lifecycle operations (SPEC §1.6, §8).

Never reachable over MCP. Every operation goes the way an agent call goes: the maintenance
authority is decided by `engram.maintenance` (Rego), the transition by the one lifecycle
table, and the journal event, state change and audit entry commit in one transaction. Each
operation's action gathers its audit facts in the `CallAudit` it is given and returns a
`ToolOutcome`, as a tool does (core/call_audit.py).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engram_memory.admin.names import RECORD_OPERATIONS
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import digest
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    ConfigurationError,
    StoreCorrupt,
    StoreUnavailable,
    ToolError,
)
from engram_memory.contract.lifecycle import ACCEPTED_CURRENT, next_state
from engram_memory.core import item_keys, steps
from engram_memory.core.admission_outcome import conclude_admission, rebuild_record
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.failures import known_failure
from engram_memory.core.runtime import CallContext, Services
from engram_memory.host.context import InvocationContext
from engram_memory.store import journal, memory
from engram_memory.store.transaction import Transaction

Progress = Callable[[str], None]
# An operation's body: given the operator's context and the call's audit facts.
Action = Callable[[CallContext, CallAudit], ToolOutcome]
log = logging.getLogger("engram_memory.admin")


@dataclass(frozen=True)
class Operator:
    """The human acting, and on which workspace."""

    tenant: str
    workspace: str
    operator: str  # human:<subject>


def operator_context(services: Services, who: Operator, operation: str) -> CallContext:
    """A call context for a host operator: bound to the workspace's scope, audited as
    `admin:<operation>`, never carrying an agent's credentials."""
    now_s = services.clock_ms() // 1000
    invocation = InvocationContext(
        host_id="host:maintenance",
        tenant=who.tenant,
        workspace=who.workspace,
        principal=who.operator,
        agent_id="host:maintenance",
        session=f"maintenance:{uuid.uuid4().hex}",
        purpose_ref="purpose:maintenance",
        audit_id=f"admin:{uuid.uuid4().hex}",
        issued_at_s=now_s,
        expires_at_s=now_s + 300,
    )
    return CallContext(services, invocation, f"admin:{operation}", services.clock_ms())


def authorize_operator(
    ctx: CallContext,
    audit: CallAudit,
    who: Operator,
    authority: str,
    operation: str,
    scope_ref: str | None = None,
) -> None:
    """Decide `authority` for the operator in `scope_ref` (default: its bound workspace) and
    keep the receipt in `audit`, so that it lands in the operation's audit entry.

    Raises:
        ToolError: UNAUTHORIZED without the authority; POLICY_* from the decider.
    """
    tenant, workspace = who.tenant, who.workspace
    if scope_ref is not None:
        tenant, workspace = split_scope_ref(scope_ref)
    result = ctx.services.decider.maintenance(tenant, workspace, who.operator, authority, operation)
    audit.decided(result.decision)
    if not result.allow:
        raise ToolError(ErrorCode.UNAUTHORIZED, "maintenance authority not held")


def split_scope_ref(scope_ref: str) -> tuple[str, str]:
    """(tenant, workspace) of `tenant:<t>/workspace:<w>`.

    Raises:
        ToolError: INVALID_SCHEMA for any other form.
    """
    tenant, _, workspace = scope_ref.partition("/")
    if not tenant.startswith("tenant:") or not workspace.startswith("workspace:"):
        raise ToolError(ErrorCode.INVALID_SCHEMA, "not a scope reference")
    return tenant.removeprefix("tenant:"), workspace.removeprefix("workspace:")


def run_authorized(
    services: Services,
    who: Operator,
    operation: str,
    authority: str,
    action: Action,
) -> dict[str, JsonValue]:
    """Authorize, act, and audit every outcome (refusals included), as agent calls are.

    `action` may authorize further scopes with `authorize_operator` and may write the audit
    entry itself inside its own transaction (`steps.audit_in_transaction`); this writes it
    otherwise.

    Raises:
        ToolError: UNAUTHORIZED without the authority; the operation's own codes.
        StoreUnavailable: the audit entry of a successful operation cannot be written.
    """
    # All its decisions from one policy revision, as for agent calls (an OPA fleet's rollout).
    with services.decider.one_revision_per_call():
        return _run_authorized(services, who, operation, authority, action)


def _run_authorized(
    services: Services, who: Operator, operation: str, authority: str, action: Action
) -> dict[str, JsonValue]:
    ctx = operator_context(services, who, operation)
    audit = CallAudit()
    try:
        authorize_operator(ctx, audit, who, authority, operation)
        outcome = action(ctx, audit)
    except ToolError as refusal:
        _audit_refusal(ctx, ToolOutcome.failed(refusal, audit))
        raise
    except ConfigurationError:
        raise
    except Exception as exc:
        # As for agent calls: known failures get their contract code, anything else is a
        # capability fault, logged by type only (its text may quote content).
        failure = known_failure(exc)
        if failure is None:
            log.error("unexpected %s in admin:%s", type(exc).__name__, operation)
            failure = ToolError(ErrorCode.CAPABILITY_UNAVAILABLE, type(exc).__name__)
        _audit_refusal(ctx, ToolOutcome.failed(failure, audit))
        raise failure from exc
    if not outcome.written_in_tx:
        with services.database.transaction() as tx:
            steps.write_audit(tx, ctx, outcome.facts)
    return outcome.result()


def _audit_refusal(ctx: CallContext, outcome: ToolOutcome) -> None:
    """Audit a refused or failed operation, unless the action audited it already.

    Raises:
        ToolError: STORE_UNAVAILABLE when the audit entry cannot be written (fail closed).
    """
    if outcome.written_in_tx:
        return
    try:
        with ctx.services.database.transaction() as tx:
            steps.write_audit(tx, ctx, outcome.facts)
    except StoreUnavailable as exc:
        damaged = isinstance(exc, StoreCorrupt)  # never retriable
        code = ErrorCode.JOURNAL_CORRUPT if damaged else ErrorCode.STORE_UNAVAILABLE
        raise ToolError(code, "audit write failed") from exc


class MaintenanceService:
    """Maintenance operations over the same store, keys and policy as the six tools."""

    def __init__(self, services: Services) -> None:
        self.services = services

    # -- adjudication ------------------------------------------------------------------

    def adjudicate(
        self, who: Operator, candidate_id: str, decision: str, reason_ref: str
    ) -> dict[str, JsonValue]:
        """A human accepts or rejects a pending candidate (e.g. one held by the guard)."""

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            # Argument checks inside the action, so a refused call is audited too.
            if decision not in ("accept", "reject"):
                raise ToolError(ErrorCode.INVALID_SCHEMA, "decision must be accept or reject")
            audit.targets(candidate_id)
            with self.services.database.transaction() as tx:
                candidate = memory.get_candidate(tx, ctx.scope_ref, candidate_id)
            if candidate is None:
                raise ToolError(ErrorCode.NOT_FOUND, "candidate unknown")
            # Refuse a decided candidate before opening its (destroyed) key.
            next_state(decision, candidate.state)
            record = rebuild_record(
                steps.open_item(ctx, candidate_id, candidate.sealed_body),
                candidate.capture_cursor,
            )
            if decision == "accept":
                # The record's key is durable before the transaction opens.
                with item_keys.fresh_key(ctx, str(record["record_id"])) as key:
                    event = self._conclude(ctx, audit, candidate, record, decision, reason_ref, key)
            else:
                event = self._conclude(ctx, audit, candidate, record, decision, reason_ref, None)
            item_keys.after_commit(ctx, [candidate_id])
            output: dict[str, JsonValue] = {
                "candidate_id": candidate_id,
                "status": "accepted" if decision == "accept" else "rejected",
                "cursor": event.cursor_text,
            }
            if decision == "accept":
                output["record_id"] = record["record_id"]
            return ToolOutcome.succeeded(output, audit)

        return run_authorized(self.services, who, "adjudicate", "maintain", act)

    def _conclude(
        self,
        ctx: CallContext,
        audit: CallAudit,
        candidate: memory.CandidateRow,
        record: dict[str, JsonValue],
        decision: str,
        reason_ref: str,
        key: item_keys.FreshKey | None,
    ) -> journal.JournalEvent:
        """The adjudication's write transaction; the candidate must still be as it was read.

        Raises:
            ToolError: ALREADY_TERMINAL / ILLEGAL_TRANSITION when it was decided meanwhile;
                NOT_FOUND if it vanished.
        """
        sealed_record = None if key is None else key.seal(record)
        with self.services.database.transaction() as tx:
            current = memory.get_candidate(tx, ctx.scope_ref, candidate.candidate_id)
            if current is None:
                raise ToolError(ErrorCode.NOT_FOUND, "candidate unknown")
            event = conclude_admission(
                tx,
                ctx,
                audit,
                current,
                record,
                decision,
                {
                    "digests": {
                        "record_digest": candidate.record_digest,
                        "reason_digest": digest("reason", {"reason_ref": reason_ref}),
                    },
                    "adjudicated_by": ctx.principal_ref,
                },
                sealed_record,
            )
            steps.audit_in_transaction(tx, ctx, audit)
        return event

    # -- record lifecycle -----------------------------------------------------------------

    def transition(
        self,
        who: Operator,
        operation: str,
        record_id: str,
        reason_ref: str,
        successor_id: str | None = None,
    ) -> dict[str, JsonValue]:
        """dispute, resolve_dispute, supersede (with `successor_id`), mark_non_current,
        rewind, expire or trust_invalidate one record."""

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            # Argument checks inside the action, so a refused call is audited too.
            if operation not in RECORD_OPERATIONS:
                raise ToolError(ErrorCode.INVALID_SCHEMA, "unknown record operation")
            if (operation == "supersede") != (successor_id is not None):
                raise ToolError(ErrorCode.INVALID_SCHEMA, "successor_id goes with supersede only")
            audit.targets(record_id)
            with self.services.database.transaction() as tx:
                output = self._transition(
                    tx, ctx, audit, operation, record_id, reason_ref, successor_id
                )
                steps.audit_in_transaction(tx, ctx, audit)
            return ToolOutcome.succeeded(output, audit)

        return run_authorized(self.services, who, operation, "maintain", act)

    def _transition(
        self,
        tx: Transaction,
        ctx: CallContext,
        audit: CallAudit,
        operation: str,
        record_id: str,
        reason_ref: str,
        successor_id: str | None,
    ) -> dict[str, JsonValue]:
        record = memory.get_record(tx, ctx.scope_ref, record_id)
        if record is None:
            raise ToolError(ErrorCode.NOT_FOUND, "record unknown")
        to_state = next_state(operation, record.state)
        if operation == "supersede":
            assert successor_id is not None
            successor = memory.get_record(tx, ctx.scope_ref, successor_id)
            if successor is None or successor_id == record_id:
                raise ToolError(ErrorCode.NOT_FOUND, "successor unknown")
            if successor.state != ACCEPTED_CURRENT:
                raise ToolError(ErrorCode.ILLEGAL_TRANSITION, "successor not accepted_current")
            audit.targets(successor_id)
        demoted = None
        if operation == "rewind":
            demoted = memory.successor_of(tx, ctx.scope_ref, record_id)
        event = journal.append(
            tx,
            ctx.scope_ref,
            event_id=f"{operation}:{record_id}@{journal.head(tx, ctx.scope_ref)[0] + 1}",
            operation=operation,
            target_id=record_id,
            fields={
                "digests": {"reason_digest": digest("reason", {"reason_ref": reason_ref})},
                "from_state": record.state,
                "to_state": to_state,
                "successor_id": successor_id or demoted or "",
                "operator_ref": ctx.principal_ref,
                "recorded_at": ctx.now_instant,
            },
        )
        memory.set_record_state(tx, ctx.scope_ref, record_id, to_state, ctx.now_ms, successor_id)
        if demoted is not None:
            # SPEC §8: rewinding a superseded record demotes its successor atomically.
            demoted_row = memory.get_record(tx, ctx.scope_ref, demoted)
            if demoted_row is not None and demoted_row.state in (
                "accepted_current",
                "accepted_disputed",
            ):
                memory.set_record_state(tx, ctx.scope_ref, demoted, "historical", ctx.now_ms)
                audit.targets(demoted)
        return {
            "record_id": record_id,
            "operation": operation,
            "from_state": record.state,
            "to_state": to_state,
            "cursor": event.cursor_text,
            "event_digest": event.event_hash,
        }

    def expiry_sweep(self, who: Operator, progress: Progress) -> dict[str, JsonValue]:
        """Journal an `expire` for every live record past its `expires_at`."""

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            with self.services.database.transaction() as tx:
                due = memory.expired_record_ids(tx, ctx.scope_ref, ctx.now_ms)
                for index, record_id in enumerate(due, start=1):
                    self._transition(
                        tx, ctx, audit, "expire", record_id, "reason:expiry-sweep", None
                    )
                    audit.targets(record_id)
                    progress(f"expired {index}/{len(due)}")
                steps.audit_in_transaction(tx, ctx, audit)
            return ToolOutcome.succeeded({"expired": len(due)}, audit)

        return run_authorized(self.services, who, "expiry_sweep", "maintain", act)

    # -- inspection (read authority) -------------------------------------------------------

    def history(self, who: Operator, target_id: str) -> dict[str, JsonValue]:
        """The journal events of a candidate or record (ids and digests, never content)."""

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            audit.targets(target_id)
            with self.services.database.reading() as tx:
                events = journal.events_for(tx, ctx.scope_ref, target_id)
            if not events:
                raise ToolError(ErrorCode.NOT_FOUND, "no history")
            return ToolOutcome.succeeded({"target_id": target_id, "events": events}, audit)

        return run_authorized(self.services, who, "history", "read", act)

    def inspect_candidate(
        self, who: Operator, candidate_id: str, *, show_content: bool = False
    ) -> dict[str, JsonValue]:
        """A candidate's state and digests; its sealed content only on explicit request
        (audited as such), so an operator can adjudicate what it cannot otherwise see."""

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            audit.targets(candidate_id)
            with self.services.database.reading() as tx:
                candidate = memory.get_candidate(tx, ctx.scope_ref, candidate_id)
            if candidate is None:
                raise ToolError(ErrorCode.NOT_FOUND, "candidate unknown")
            view: dict[str, Any] = {
                "candidate_id": candidate_id,
                "state": candidate.state,
                "payload_digest": candidate.payload_digest,
                "record_digest": candidate.record_digest,
                "capture_cursor": str(candidate.capture_cursor),
            }
            if show_content:
                view["envelope"] = steps.open_item(ctx, candidate_id, candidate.sealed_body)
            return ToolOutcome.succeeded(view, audit)

        operation = "inspect_candidate_content" if show_content else "inspect_candidate"
        return run_authorized(self.services, who, operation, "read", act)
