"""One entry for every call: the processing order of SPEC §1.8, failure mapping, audit.

Order: tool name → trusted context → visibility → purpose_ref → schema and secrets →
(per tool) confirmation gate → authorization → idempotency → target and operation. The first
failure decides. Every outcome, allowed or refused, leaves exactly one audit entry; if that
entry cannot be written the call fails.

A call's audit facts are gathered in one `CallAudit`, made here and passed to the tool; the
tool returns a `ToolOutcome` with them (core/call_audit.py). A mutation writes its entry in
its own write transaction; every other outcome (reads, replays, refusals) is written here,
through the group writer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.envelope import failure_envelope, success_envelope
from engram_memory.contract.errors import (
    ConfigurationError,
    ErrorCode,
    ProtocolCode,
    ProtocolRefusal,
    ToolError,
)
from engram_memory.contract.parsing import (
    ParsedArguments,
    check_bound_purpose,
    decode_arguments,
    validate_arguments,
)
from engram_memory.contract.schemas import TOOL_SPECS, ToolSpec
from engram_memory.contract.secrets import SecretDetector, detector_for
from engram_memory.contract.types import ToolName
from engram_memory.core.audit_writer import AuditGroupWriter
from engram_memory.core.call_audit import AuditFacts, CallAudit, ToolOutcome
from engram_memory.core.failures import known_failure
from engram_memory.core.host_audit import PreBindingRefusal
from engram_memory.core.runtime import CallContext, Services
from engram_memory.host.context import InvocationContext, verify_invocation
from engram_memory.host.tokens import TokenInvalid
from engram_memory.policy.decider import DiscoveryResult
from engram_memory.policy.engine import PolicyStale, PolicyUnavailable
from engram_memory.tools import admission, capture, get, lifecycle, search

log = logging.getLogger("engram_memory.calls")

_READ_TOOLS = frozenset({"engram_memory_search", "engram_memory_get"})

ToolHandler = Callable[[CallContext, CallAudit, ParsedArguments, object], ToolOutcome]

_HANDLERS: dict[str, ToolHandler] = {
    "engram_memory_search": lambda ctx, audit, parsed, _c: search.search(ctx, audit, parsed),
    "engram_memory_get": lambda ctx, audit, parsed, _c: get.get(ctx, audit, parsed),
    "engram_memory_capture": capture.capture,
    "engram_memory_request_admission": admission.request_admission,
    "engram_memory_withdraw": lifecycle.withdraw,
    "engram_memory_forget": lifecycle.forget,
}


def _never_store_detector(patterns: tuple[str, ...]) -> SecretDetector:
    """The built-in shapes plus the scope's policy-data shapes.

    Raises:
        PolicyUnavailable: a shape does not compile (`policy build` refuses such data, so
            the engine serves a bundle that was not built by it): fail closed.
    """
    try:
        return detector_for(patterns)
    except ConfigurationError as exc:
        raise PolicyUnavailable("never-store pattern does not compile") from exc


def discover(ctx: CallContext, audit: CallAudit) -> DiscoveryResult:
    """The tools and never-store shapes policy shows this binding; the receipt goes to `audit`.

    Raises:
        PolicyUnavailable / PolicyStale: the decider cannot answer.
    """
    result = ctx.services.decider.discovery(ctx.subject, ctx.services.settings.host_memory_enabled)
    audit.decided(result.decision)
    return result


def parse_call(
    ctx: CallContext,
    audit: CallAudit,
    raw_arguments: object,
    *,
    duplicate_keys: bool = False,
) -> ParsedArguments:
    """The steps of SPEC §1.8 before a tool's own: visibility, purpose binding, schema and
    secrets. Shared by every call and the bulk import (admin/importing.py).

    `duplicate_keys`: the raw arguments held a key twice (raw or after NFC, SPEC §3); the
    parsed object kept only one of them, so it is refused as the schema error it is, before
    anything (the bound purpose included) is read from it.

    Raises:
        ProtocolRefusal: the tool is not visible (-32602) or the purpose differs (-32603).
        ToolError: INVALID_SCHEMA / INVALID_DIGEST for the arguments.
        PolicyUnavailable / PolicyStale: the decider cannot answer.
    """
    discovery = discover(ctx, audit)
    if ctx.tool not in discovery.visible_tools:
        raise ProtocolRefusal(ProtocolCode.UNKNOWN_TOOL, "tool not visible to binding")
    if duplicate_keys:
        raise ToolError(ErrorCode.INVALID_SCHEMA, "arguments:duplicate_key")
    tool = ToolName(ctx.tool)
    arguments = decode_arguments(raw_arguments)
    check_bound_purpose(tool, arguments, ctx.invocation.purpose_ref)
    detector = _never_store_detector(discovery.never_store_patterns)
    return validate_arguments(tool, arguments, detector=detector)


@dataclass(frozen=True)
class CallRequest:
    tool: str
    arguments: object
    invocation_token: object
    confirmation_token: object = None
    # Set when the client cancels the call; checked until commit.
    cancellation: threading.Event | None = None
    # The JSON gate saw a duplicate key in the raw arguments (json_gate.py); never set from
    # anything the client sent in the parsed request.
    duplicate_argument_keys: bool = False


class MemoryService:
    """The six tools over one store and one policy decider."""

    def __init__(self, services: Services) -> None:
        self.services = services
        # Reads, replays and refusals write only their audit entry: committed in groups.
        self._audits = AuditGroupWriter(services.database)

    def _bind(self, token: object) -> InvocationContext:
        try:
            return verify_invocation(
                token, self.services.host_keys, self.services.clock_ms() / 1000
            )
        except TokenInvalid as exc:
            raise ProtocolRefusal(ProtocolCode.CONTEXT_UNAVAILABLE, str(exc)) from exc

    def refused_before_binding(self, refusal: PreBindingRefusal) -> None:
        """Record a refusal made before any binding in the host-level audit stream; never
        raises."""
        # placeholder: issue9-refusals implements

    def _discover(self, ctx: CallContext, audit: CallAudit) -> DiscoveryResult:
        return discover(ctx, audit)

    def list_tools(self, invocation_token: object) -> list[ToolSpec]:
        """The tools this binding may see (deny-as-missing).

        Raises:
            ProtocolRefusal: the context is missing/invalid, or policy cannot be consulted.
        """
        invocation = self._bind(invocation_token)
        ctx = CallContext(self.services, invocation, "tools/list", self.services.clock_ms())
        try:
            # Listing is not a call: nothing is audited.
            visible = self._discover(ctx, CallAudit()).visible_tools
        except (PolicyUnavailable, PolicyStale) as exc:
            # Never an empty list for an outage (SPEC §2), and not -32603 either ("stop, never
            # retry"): the retriable -32000, like POLICY_UNAVAILABLE for a call.
            raise ProtocolRefusal(ProtocolCode.POLICY_UNAVAILABLE, "policy unavailable") from exc
        return [spec for name, spec in TOOL_SPECS.items() if name in visible]

    def call_tool(self, request: CallRequest) -> dict[str, JsonValue]:
        """Run one tool call and return its envelope.

        Raises:
            ProtocolRefusal: -32602 / -32603 per SPEC §1.7 (audited when a scope is known).
        """
        if request.tool not in TOOL_SPECS:
            raise ProtocolRefusal(ProtocolCode.UNKNOWN_TOOL, "unknown tool name")
        invocation = self._bind(request.invocation_token)
        ctx = CallContext(
            self.services,
            invocation,
            request.tool,
            self.services.clock_ms(),
            cancellation=request.cancellation,
        )
        outcome = self._run(ctx, CallAudit(), request)
        if isinstance(outcome.error, ProtocolRefusal):
            # Audited when possible; the refusal stands either way.
            self._audit(ctx, outcome)
            raise outcome.error
        written = self._audit(ctx, outcome)
        if written is None:
            # No audit entry, no answer: an unaudited success must not reach the agent.
            # A damaged store file is not retriable (store/database.py fail-stop).
            damaged = self.services.database.damaged
            code = ErrorCode.JOURNAL_CORRUPT if damaged else ErrorCode.STORE_UNAVAILABLE
            return failure_envelope(code, invocation.audit_id)
        if written.outcome != outcome.facts.outcome:
            # Its confirmation was consumed by another call first (steps.write_audits).
            return failure_envelope(ErrorCode.gate_failed, invocation.audit_id)
        if outcome.error is not None:
            return failure_envelope(outcome.error.code, invocation.audit_id)
        assert outcome.value is not None
        if outcome.written_in_tx and self.services.settings.failpoints.drop_response_after_commit(
            request.tool
        ):
            # Test-only (UnsafeFailpoints): the commit stands, the answer is "lost".
            return failure_envelope(ErrorCode.MUTATION_OUTCOME_UNKNOWN, invocation.audit_id)
        return success_envelope(outcome.value, invocation.audit_id)

    def _audit(self, ctx: CallContext, outcome: ToolOutcome) -> AuditFacts | None:
        """Write the outcome's entry unless the tool wrote it in its own write transaction;
        return the facts of the call's entry, or None if it failed."""
        if outcome.written_in_tx:
            return outcome.facts
        written = self._audits.write(ctx, outcome.facts)
        if written is None:
            log.error("audit write failed tool=%s outcome=%s", ctx.tool, outcome.facts.outcome)
        return written

    def _run(self, ctx: CallContext, audit: CallAudit, request: CallRequest) -> ToolOutcome:
        """The call from visibility to its result; every failure becomes a failed outcome
        carrying the audit facts gathered until then."""
        commits_before = self.services.database.commits_on_this_thread()
        try:
            parsed = parse_call(
                ctx, audit, request.arguments, duplicate_keys=request.duplicate_argument_keys
            )
            ctx.check_still_wanted()
            return _HANDLERS[request.tool](ctx, audit, parsed, request.confirmation_token)
        except (ProtocolRefusal, ToolError) as refusal:
            return ToolOutcome.failed(refusal, audit)
        except Exception as exc:  # noqa: BLE001 - mapped to a code and audited below
            known = known_failure(exc)
            if known is not None:
                known.__cause__ = exc
                return ToolOutcome.failed(known, audit)
            # The one boundary where unknown failures become codes. The type only is
            # logged: exception text may quote stored content or arguments.
            log.error("unexpected %s in %s", type(exc).__name__, ctx.tool)
            # SPEC §5: unknown if anything of this call may be durable, else a capability fault.
            committed = self.services.database.commits_on_this_thread() > commits_before
            code = (
                ErrorCode.MUTATION_OUTCOME_UNKNOWN
                if committed and request.tool not in _READ_TOOLS
                else ErrorCode.CAPABILITY_UNAVAILABLE
            )
            failure = ToolError(code, type(exc).__name__)
            failure.__cause__ = exc
            return ToolOutcome.failed(failure, audit)
