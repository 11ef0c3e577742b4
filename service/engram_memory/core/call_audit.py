"""The audit facts of one call, and the outcome a tool returns with them.

Every outcome of a call, allowed or refused, leaves exactly one audit entry carrying the
receipts of the decisions that were made (DESIGN "Audit"). Those facts are gathered in a
`CallAudit` that the call's entry point (tools/dispatch.py, admin/maintenance.py) creates and
passes explicitly to every step that decides or targets something; nothing else holds them.

A tool returns a `ToolOutcome`: its value, or the error that refused it, with the frozen
`AuditFacts` of its entry and whether that entry was already written in the tool's own write
transaction. The entry point writes every other entry (reads, replays, refusals) itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.exceptions import ProtocolRefusal, ToolError
from engram_memory.policy.receipts import Decision
from engram_memory.store.audit import ApprovalEvidence


@dataclass(frozen=True)
class ConfirmationSpend:
    """A host confirmation the gate verified, to be consumed with the call's audit entry.

    `unused_at` is the generation of the snapshot that found it unused (store/published.py):
    the call's write transaction re-checks only if a commit since consumed it. `approval`
    is the evidence of who approved, recorded with the entry that spends it.
    """

    approval: ApprovalEvidence
    unused_at: int

    @property
    def jti(self) -> str:
        return self.approval.jti


@dataclass(frozen=True)
class AuditFacts:
    """What one call's audit entry records beyond the call's binding (`CallContext`)."""

    outcome: str
    detail: str
    decisions: tuple[Decision, ...]
    target_ids: tuple[str, ...]
    idempotency_key_digest: str
    # Spent in the transaction that writes the entry, whatever the outcome (SPEC §7).
    confirmation: ConfirmationSpend | None = None


class CallAudit:
    """The audit facts of one call while it runs: the decisions made so far, in order, the
    ids the call targets and its idempotency key digest."""

    def __init__(self) -> None:
        self._decisions: list[Decision] = []
        self._target_ids: list[str] = []
        self._idempotency_key_digest = ""
        self._confirmation: ConfirmationSpend | None = None
        self._written: AuditFacts | None = None
        self._detail = ""

    def decided(self, decision: Decision) -> Decision:
        """Keep a decision so its receipt lands in this call's audit entry."""
        self._decisions.append(decision)
        return decision

    def targets(self, item_id: str) -> None:
        self._target_ids.append(item_id)

    def noted(self, detail: str) -> None:
        """A fact about the call's outcome worth the entry (no content, ids or secrets):
        recorded with its outcome unless that carries a detail of its own."""
        self._detail = detail

    def keyed(self, idempotency_key_digest: str) -> None:
        self._idempotency_key_digest = idempotency_key_digest

    def confirmed(self, spend: ConfirmationSpend) -> None:
        """The gate passed with this confirmation; the call's entry spends it."""
        self._confirmation = spend

    @property
    def confirmation(self) -> ConfirmationSpend | None:
        return self._confirmation

    def approval_fields(self) -> dict[str, JsonValue]:
        """The `approval` member of the journal event of a confirmed call, else nothing: an
        event without a confirmation keeps exactly the bytes (and hash) it always had."""
        if self._confirmation is None:
            return {}
        return {"approval": self._confirmation.approval.as_json()}

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return tuple(self._decisions)

    @property
    def target_ids(self) -> tuple[str, ...]:
        return tuple(self._target_ids)

    @property
    def idempotency_key_digest(self) -> str:
        return self._idempotency_key_digest

    def facts(self, outcome: str, detail: str = "") -> AuditFacts:
        """The facts as they stand now, for an entry with `outcome`."""
        return AuditFacts(
            outcome=outcome,
            detail=detail or self._detail,
            decisions=tuple(self._decisions),
            target_ids=tuple(self._target_ids),
            idempotency_key_digest=self._idempotency_key_digest,
            confirmation=self._confirmation,
        )

    def wrote(self, facts: AuditFacts) -> None:
        """`facts` went into the call's own write transaction (core/steps.py
        `audit_in_transaction`): whatever happens next, that is the call's one entry (its
        commit may still fail, and then its outcome is unknown, not unaudited)."""
        self._written = facts

    @property
    def written(self) -> AuditFacts | None:
        """The entry written in the call's own transaction, if one was."""
        return self._written


def refusal_outcome(error: ToolError | ProtocolRefusal) -> str:
    """The audit outcome of a refused call: the contract code, or `rpc:<code>`."""
    if isinstance(error, ProtocolRefusal):
        return f"rpc:{error.code.rpc_code}"
    return error.code.name


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call came to: `value` or `error`, with the facts of its audit entry.

    `written_in_tx` is True when the entry was written in the tool's own write transaction;
    the entry point writes it otherwise.
    """

    value: dict[str, JsonValue] | None
    error: ToolError | ProtocolRefusal | None
    facts: AuditFacts
    written_in_tx: bool

    @classmethod
    def succeeded(cls, value: dict[str, JsonValue], audit: CallAudit) -> ToolOutcome:
        written = audit.written
        facts = audit.facts("ok") if written is None else written
        return cls(value, None, facts, written is not None)

    @classmethod
    def failed(cls, error: ToolError | ProtocolRefusal, audit: CallAudit) -> ToolOutcome:
        """A refusal, or a failure: carries the receipts of the decisions made before it."""
        written = audit.written
        facts = audit.facts(refusal_outcome(error), error.detail) if written is None else written
        return cls(None, error, facts, written is not None)

    def result(self) -> dict[str, JsonValue]:
        """The value of a successful outcome.

        Raises:
            ToolError / ProtocolRefusal: the outcome's error.
        """
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value
