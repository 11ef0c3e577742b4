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

import dataclasses
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.classifiers import ClassifierSet, classifier_set_for
from engram_memory.contract.envelope import failure_envelope, success_envelope
from engram_memory.contract.errors import ErrorCode, ProtocolCode
from engram_memory.contract.exceptions import (
    ConfigurationError,
    PolicyStale,
    PolicyUnavailable,
    ProtocolRefusal,
    StoreUnavailable,
    TokenExpired,
    TokenInvalid,
    ToolError,
)
from engram_memory.contract.parsing import (
    ParsedArguments,
    check_bound_purpose,
    decode_arguments_json,
    validate_arguments,
)
from engram_memory.contract.refusals import PreBindingRefusal, RefusalReason
from engram_memory.contract.schemas import TOOL_SPECS, ToolSpec
from engram_memory.contract.secrets import SecretDetector, detector_for
from engram_memory.contract.types import READ_TOOLS, ToolName
from engram_memory.core import steps
from engram_memory.core.audit_writer import AuditGroupWriter
from engram_memory.core.call_audit import AuditFacts, CallAudit, ToolOutcome
from engram_memory.core.failures import known_failure
from engram_memory.core.flood_bound import FloodLimits
from engram_memory.core.refusal_stream import RefusalStream
from engram_memory.core.replay_guard import AuditIdGuard, kept_until_ms
from engram_memory.core.revision_audit import RevisionChangeRecorder
from engram_memory.core.runtime import CallContext, Services
from engram_memory.host.context import InvocationContext, verify_invocation
from engram_memory.policy.decider import DiscoveryResult
from engram_memory.store import audit as audit_store
from engram_memory.tools import admission, capture, get, lifecycle, search

log = logging.getLogger("engram_memory.calls")

# Every this many bindings, the audit ids of expired tokens leave the store (`used_audit_ids`
# would otherwise grow by one row per call until the next start).
_PRUNE_EVERY_BINDINGS = 10_000

ToolHandler = Callable[[CallContext, CallAudit, ParsedArguments, object], ToolOutcome]

_HANDLERS: dict[str, ToolHandler] = {
    ToolName.SEARCH: lambda ctx, audit, parsed, _c: search.search(ctx, audit, parsed),
    ToolName.GET: lambda ctx, audit, parsed, _c: get.get(ctx, audit, parsed),
    ToolName.CAPTURE: capture.capture,
    ToolName.REQUEST_ADMISSION: admission.request_admission,
    ToolName.WITHDRAW: lifecycle.withdraw,
    ToolName.FORGET: lifecycle.forget,
}


# The tools whose decisions see classifier names: they hold the content (capture's payload,
# the candidate an admission opens, the records a search or get returns: their redaction).
_CLASSIFIED_TOOLS = frozenset(
    {ToolName.CAPTURE, ToolName.REQUEST_ADMISSION, ToolName.SEARCH, ToolName.GET}
)


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


def _classifiers(discovery: DiscoveryResult) -> ClassifierSet:
    """The scope's content classifiers, compiled once per distinct definitions.

    Raises:
        PolicyUnavailable: a definition this service cannot run (`policy build` refuses
            such data, so the bundle was not built by it): fail closed.
    """
    try:
        return classifier_set_for(discovery.classifiers)
    except ConfigurationError as exc:
        raise PolicyUnavailable("content classifier does not compile") from exc


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
    argument_defect: str | None = None,
) -> ParsedArguments:
    """The steps of SPEC §1.8 before a tool's own: visibility, rate limits, purpose
    binding, schema and secrets. Shared by every call and the bulk import
    (admin/importing.py).

    `argument_defect`: the JSON gate found the raw arguments unreadable as they stand (a key
    twice, raw or after NFC, or a lone surrogate: SPEC §3); the parsed object kept one of
    the keys or a replacement character, so it is refused as the schema error it is, before
    anything (the bound purpose included) is read from it.

    Raises:
        ProtocolRefusal: the tool is not visible (-32602) or the purpose differs (-32603).
        ToolError: RATE_LIMITED; INVALID_SCHEMA / INVALID_DIGEST for the arguments.
        PolicyUnavailable / PolicyStale: the decider cannot answer.
    """
    discovery = discover(ctx, audit)
    if ctx.tool not in discovery.visible_tools:
        raise ProtocolRefusal(ProtocolCode.UNKNOWN_TOOL, "tool not visible to binding")
    # Before the arguments are looked at: malformed calls count against the limit too.
    steps.admit_rate(ctx, discovery.limits_for(ctx.tool))
    if argument_defect is not None:
        raise ToolError(ErrorCode.INVALID_SCHEMA, f"arguments:{argument_defect}")
    tool = ToolName(ctx.tool)
    # Serialized once here: the size cap and, later, the operation digest read these bytes.
    arguments, arguments_json = decode_arguments_json(raw_arguments)
    check_bound_purpose(tool, arguments, ctx.invocation.purpose_ref)
    detector = _never_store_detector(discovery.never_store_patterns)
    parsed = validate_arguments(tool, arguments, detector=detector, arguments_json=arguments_json)
    if not discovery.classifiers or tool not in _CLASSIFIED_TOOLS:
        return parsed
    return dataclasses.replace(parsed, classifiers=_classifiers(discovery))


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
    argument_defect: str | None = None  # json_gate.ArgumentDefect, set by the gate only
    # Where the call came from, for the audit of its refusals (contract/refusals.py): the
    # transport, and the client's IP over HTTP or "stdio".
    transport: str = "in-process"
    peer: str = "in-process"


@dataclass(frozen=True)
class _Bound:
    invocation: InvocationContext
    kept_until_ms: int


class MemoryService:
    """The six tools over one store and one policy decider."""

    def __init__(self, services: Services) -> None:
        self.services = services
        # Reads, replays and refusals write only their audit entry: committed in groups.
        self._audits = AuditGroupWriter(services.database)
        settings = services.settings
        self._refusals = RefusalStream(
            services,
            self._audits,
            FloodLimits(settings.refusal_burst, settings.refusal_interval_ms),
        )
        self._audit_ids = AuditIdGuard(self._used_audit_ids())
        self._bindings = itertools.count(1)
        # An OPA fleet's revision changes are audited before the new revision decides.
        services.decider.follow_revisions(RevisionChangeRecorder(self._audits, services.clock_ms))

    def _used_audit_ids(self) -> list[tuple[str, int]]:
        """The audit ids bound by tokens not yet expired, from the store; expired ones go."""
        now_ms = self.services.clock_ms()
        try:
            with self.services.database.transaction() as tx:
                audit_store.prune_used_audit_ids(tx, now_ms)
                return audit_store.used_audit_ids(tx, now_ms)
        except StoreUnavailable:
            # Such a store audits nothing, so it serves nothing a replay could repeat.
            log.error("used audit ids could not be read")
            return []

    def refused_before_binding(self, refusal: PreBindingRefusal) -> None:
        """Audit a refusal made before any binding in the host-level stream (bounded per
        peer, reason and tool: core/refusal_stream.py). Never raises."""
        self._refusals.record_pre_binding(refusal)

    @property
    def refusal_stream(self) -> RefusalStream:
        return self._refusals

    def close(self) -> None:
        """Write the refusal summaries still owed; call before the store closes."""
        self.services.decider.follow_revisions(None)
        self._refusals.close()

    def _bind(self, token: object, where: CallRequest, method: str) -> _Bound:
        """Verify the invocation context and claim its audit id (single use, SPEC §1.7).

        Raises:
            ProtocolRefusal: -32603 for a missing, invalid, expired or replayed context;
                the refusal is audited in the host stream first.
        """
        now_ms = self.services.clock_ms()
        reason = None
        try:
            invocation = verify_invocation(token, self.services.host_keys, now_ms / 1000)
        except TokenExpired:
            reason = RefusalReason.TOKEN_EXPIRED
        except TokenInvalid:
            missing = token is None or token == ""
            reason = RefusalReason.TOKEN_MISSING if missing else RefusalReason.TOKEN_INVALID
        else:
            kept_until = kept_until_ms(invocation.expires_at_s * 1000)
            if self._audit_ids.claim(invocation.audit_id, kept_until, now_ms):
                if next(self._bindings) % _PRUNE_EVERY_BINDINGS == 0:
                    self._audits.write_records([], prune_before_ms=now_ms)
                return _Bound(invocation, kept_until)
            reason = RefusalReason.TOKEN_REPLAYED
        self.refused_before_binding(
            PreBindingRefusal(where.transport, where.peer, method, reason, token, where.tool)
        )
        raise ProtocolRefusal(ProtocolCode.CONTEXT_UNAVAILABLE, reason.value)

    def _discover(self, ctx: CallContext, audit: CallAudit) -> DiscoveryResult:
        return discover(ctx, audit)

    def list_tools(
        self, invocation_token: object, *, transport: str = "in-process", peer: str = "in-process"
    ) -> list[ToolSpec]:
        """The tools this binding may see (deny-as-missing); audited like a call.

        Raises:
            ProtocolRefusal: the context is missing/invalid/replayed, policy cannot be
                consulted, or the listing's audit entry cannot be written.
        """
        where = CallRequest("tools/list", None, invocation_token, transport=transport, peer=peer)
        bound = self._bind(invocation_token, where, "tools/list")
        ctx = CallContext(
            self.services,
            bound.invocation,
            "tools/list",
            self.services.clock_ms(),
            audit_id_kept_until_ms=bound.kept_until_ms,
        )
        audit = CallAudit()
        try:
            visible = self._discover(ctx, audit).visible_tools
        except (PolicyUnavailable, PolicyStale) as exc:
            # Never an empty list for an outage (SPEC §2), and not -32603 either ("stop, never
            # retry"): the retriable -32000, like POLICY_UNAVAILABLE for a call.
            refusal = ProtocolRefusal(ProtocolCode.POLICY_UNAVAILABLE, "policy unavailable")
            self._audit(ctx, ToolOutcome.failed(refusal, audit), where)
            raise refusal from exc
        if self._audit(ctx, ToolOutcome.succeeded({}, audit), where) is None:
            raise ProtocolRefusal(ProtocolCode.CONTEXT_UNAVAILABLE, "listing not audited")
        return [spec for name, spec in TOOL_SPECS.items() if name in visible]

    def call_tool(self, request: CallRequest) -> dict[str, JsonValue]:
        """Run one tool call and return its envelope; all its policy decisions come from one
        bundle revision (a call straddling a rollout is POLICY_STALE, nothing written).

        Raises:
            ProtocolRefusal: -32602 / -32603 per SPEC §1.7 (audited when a scope is known).
        """
        with self.services.decider.one_revision_per_call():
            return self._call_tool(request)

    def _call_tool(self, request: CallRequest) -> dict[str, JsonValue]:
        if request.tool not in TOOL_SPECS:
            self.refused_before_binding(
                PreBindingRefusal(
                    request.transport,
                    request.peer,
                    "tools/call",
                    RefusalReason.UNKNOWN_TOOL,
                    request.invocation_token,
                )
            )
            raise ProtocolRefusal(ProtocolCode.UNKNOWN_TOOL, "unknown tool name")
        bound = self._bind(request.invocation_token, request, "tools/call")
        invocation = bound.invocation
        ctx = CallContext(
            self.services,
            invocation,
            request.tool,
            self.services.clock_ms(),
            cancellation=request.cancellation,
            audit_id_kept_until_ms=bound.kept_until_ms,
        )
        outcome = self._run(ctx, CallAudit(), request)
        if isinstance(outcome.error, ProtocolRefusal):
            # Audited when possible; the refusal stands either way.
            self._audit(ctx, outcome, request)
            raise outcome.error
        written = self._audit(ctx, outcome, request)
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

    def _audit(
        self, ctx: CallContext, outcome: ToolOutcome, where: CallRequest
    ) -> AuditFacts | None:
        """Write the outcome's entry unless the tool wrote it in its own write transaction
        or it is a refusal counted into a summary (core/refusal_stream.py); return the facts
        of the call's entry, or None if it failed."""
        if outcome.written_in_tx:
            return outcome.facts
        if not self._refusals.audit_individually(ctx, outcome.facts, where.transport, where.peer):
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
                ctx, audit, request.arguments, argument_defect=request.argument_defect
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
                if committed and request.tool not in READ_TOOLS
                else ErrorCode.CAPABILITY_UNAVAILABLE
            )
            failure = ToolError(code, type(exc).__name__)
            failure.__cause__ = exc
            return ToolOutcome.failed(failure, audit)
