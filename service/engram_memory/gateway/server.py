"""The gateway's MCP server: the upstream's six tools, each call bound and signed here.

For every request the gateway mints a fresh invocation context for the caller (config or
verified token decides who; never the model) and, for a call that needs one, a confirmation
a human gave through elicitation (confirm.py). Whatever the client put under
`engram-memory/` in `_meta` is dropped (the client's `_meta` is not forwarded at all: only
the gateway speaks for the caller upstream). Tool names, schemas, arguments (with the
agent's `idempotency_key`), envelopes and codes pass through unchanged.

Refusals the gateway decides itself:
- a purpose argument outside the caller's purposes: JSON-RPC -32603 (as the upstream would
  answer a purpose mismatch), audited `caller_refused`/`purpose_not_allowed`, nothing sent;
- a tools/call of one of the six tools whose arguments held a duplicate key or a lone
  surrogate (the JSON gate's `ARGUMENT_DEFECT`, door.py), once the purpose rule passed: an
  `INVALID_SCHEMA` envelope whose `auditId` is the gateway audit entry (`call_refused`),
  nothing sent;
- a confirmation not given: a `gate_failed` envelope whose `auditId` is the gateway audit
  entry, nothing sent;
- an upstream that did not answer: `STORE_UNAVAILABLE` (nothing sent) or, for a mutation
  that may have been sent, `MUTATION_OUTCOME_UNKNOWN`, both retriable.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from engram_memory import package_version
from engram_memory.contract.agent_manual import configured_language, instructions
from engram_memory.contract.canonical import nfc, normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.contract.envelope import envelope_json, failure_envelope
from engram_memory.contract.errors import ErrorCode, ProtocolCode, wire_error_message
from engram_memory.contract.exceptions import (
    CallerUnavailable,
    GatewayAuditUnavailable,
    NonCanonicalValue,
    UpstreamUnavailable,
)
from engram_memory.contract.types import MUTATING_TOOLS, READ_TOOLS, ToolName
from engram_memory.gateway import confirm
from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.caller import Caller
from engram_memory.gateway.config import GatewayConfig
from engram_memory.gateway.door import CALL_REFUSED
from engram_memory.gateway.minting import InvocationMinter
from engram_memory.gateway.preview import target_preview
from engram_memory.gateway.upstream import Upstream
from engram_memory.host.confirmation import (
    CONFIRMATION_META_KEY,
    ConfirmationBinding,
    mint_confirmation,
)
from engram_memory.host.context import INVOCATION_META_KEY
from engram_memory.host.keys import HostSigningKey
from engram_memory.transport.json_gate import ARGUMENT_DEFECT

log = logging.getLogger("engram_memory.gateway")

SERVER_NAME = "engram-memory"
MUTATIONS: frozenset[str] = MUTATING_TOOLS
TOOLS: frozenset[str] = frozenset(ToolName)
# The argument naming what a confirmed call acts on; capture has none (its target is the
# operation digest, SPEC §7).
_TARGET_ARGUMENT: dict[str, str] = {
    ToolName.WITHDRAW: "candidate_id",
    ToolName.FORGET: "record_id",
    ToolName.REQUEST_ADMISSION: "candidate_id",
}
# The ids the server emits (SPEC §3, §9.3, §9.4), and a capture's operation digest.
_SHOWN_TARGET = re.compile(r"mem_[a-z2-7]{52}|candidate_[0-9a-f]{64}|sha256:[0-9a-f]{64}")
# tools/list when the upstream cannot be reached: retriable, as the upstream's own policy
# outage answer is (JSON-RPC's server error range), never an empty list.
_STORE_UNAVAILABLE_RPC = (-32000, ErrorCode.STORE_UNAVAILABLE.message)
# Callers already told that they have no tool: one line each, not one per tools/list, and a
# bounded memory of them (a team gateway meets many principals).
_UNGRANTED_REMEMBERED = 1024


class _GatewayRefusal(MCPError):
    """A refusal the gateway decided, with its own constant message (passed unchanged)."""


def _context_unavailable() -> MCPError:
    code = ProtocolCode.CONTEXT_UNAVAILABLE
    return _GatewayRefusal(code.rpc_code, code.message)


def purpose_argument(tool: str, arguments: Mapping[str, Any] | None) -> object:
    """The purpose a call declares (None when the tool has none or it is absent)."""
    if arguments is None:
        return None
    if tool == ToolName.CAPTURE:
        payload = arguments.get("payload")
        return payload.get("purpose_ref") if isinstance(payload, dict) else None
    if tool in READ_TOOLS:
        return arguments.get("purpose_ref")
    return None


def bound_purpose(caller: Caller, declared: object) -> str | None:
    """The purpose to sign for a call: the declared one if the caller may use it, the
    caller's first purpose when none (or a non-string the upstream refuses as a schema
    error) is declared; None when the declared purpose is not the caller's."""
    if not isinstance(declared, str):
        return caller.purposes[0]
    try:
        purpose = nfc(declared)
    except NonCanonicalValue:
        return None
    return purpose if purpose in caller.purposes else None


def duplicate_arguments_refused(tool: str) -> bool:
    """True when this call (the message the current task handles) must be refused for a
    duplicate argument key: the JSON gate flagged it and the tool is one of the six (the
    upstream answers an unknown tool before it looks at arguments; forwarded, it still
    does)."""
    return ARGUMENT_DEFECT.get() is not None and tool in TOOLS


def refuse_duplicate_arguments(audit: GatewayAudit, caller: Caller, tool: str) -> str:
    """The audit id of the `call_refused` entry for this call, its reason the defect
    (`duplicate_argument_keys` or `unpaired_surrogate_in_arguments`).

    Raises:
        GatewayAuditUnavailable: the entry cannot be written (the call fails closed).
    """
    reason = str(ARGUMENT_DEFECT.get())
    return audit.record(CALL_REFUSED, reason=reason, caller=caller, tool=tool)


def _envelope_result(code: ErrorCode, audit_id: str) -> types.CallToolResult:
    envelope = failure_envelope(code, audit_id)
    return types.CallToolResult(
        content=[types.TextContent(text=envelope_json(envelope))],
        structured_content=envelope,
        is_error=True,
    )


class _Gateway:
    """The request handlers, with what they share loaded once."""

    def __init__(
        self,
        upstream: Upstream,
        caller_of: Callable[[ServerRequestContext[Any]], Caller],
        config: GatewayConfig,
        audit: GatewayAudit,
    ) -> None:
        self.upstream = upstream
        self.caller_of = caller_of
        self.config = config
        self.audit = audit
        self.signer = HostSigningKey.from_pem_file(config.signing_key)
        self.minter = InvocationMinter(self.signer, config.host_id, config.upstream.audience)
        self.confirmed = config.confirmed_tools
        self.states = confirm.RequestStates(config.confirmation.timeout_s)
        self.told_ungranted: set[tuple[str, str, str]] = set()

    def _caller(self, ctx: ServerRequestContext[Any]) -> Caller:
        try:
            return self.caller_of(ctx)
        except CallerUnavailable:
            raise _context_unavailable() from None

    def _invocation(self, caller: Caller, purpose: str) -> str:
        return self.minter.mint(caller, purpose)

    def _record(self, event: str, **fields: Any) -> str:
        try:
            return self.audit.record(event, **fields)
        except GatewayAuditUnavailable:
            log.error("gateway audit log unwritable: refusing the call")
            raise _context_unavailable() from None

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        caller = self._caller(ctx)
        meta = {INVOCATION_META_KEY: self._invocation(caller, caller.purposes[0])}
        try:
            listed = await self.upstream.list_tools(meta)
        except UpstreamUnavailable as failure:
            self._record("upstream_unavailable", reason=failure.reason, caller=caller)
            raise _GatewayRefusal(*_STORE_UNAVAILABLE_RPC) from None
        if not listed.tools:
            self._say_how_to_grant(caller)
        return listed

    def _say_how_to_grant(self, caller: Caller) -> None:
        """An empty tools/list is the policy's answer (SPEC §1.5: only granted tools are
        listed), which leaves the person at the client with nothing to go on: the operator's
        log names the fix once per caller."""
        key = (caller.tenant, caller.workspace, caller.principal)
        if key in self.told_ungranted or len(self.told_ungranted) >= _UNGRANTED_REMEMBERED:
            return
        self.told_ungranted.add(key)
        log.warning(
            "tools/list is empty: the policy grants %s no tool in %s/%s (or memory is off "
            "there). Grant a role with `engram-memory policy grant --tenant %s --workspace %s "
            "--principal %s --role ROLE`, then restart the client (docs/first-hour.md, "
            "'Grant yourself')",
            caller.principal,
            caller.tenant,
            caller.workspace,
            caller.tenant,
            caller.workspace,
            caller.principal,
        )

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        caller = self._caller(ctx)
        tool, arguments = params.name, params.arguments
        purpose = bound_purpose(caller, purpose_argument(tool, arguments))
        if purpose is None:
            self._record("caller_refused", reason="purpose_not_allowed", caller=caller, tool=tool)
            raise _context_unavailable()
        if duplicate_arguments_refused(tool):  # SPEC §1.8: after the purpose, before all else
            try:
                audit_id = refuse_duplicate_arguments(self.audit, caller, tool)
            except GatewayAuditUnavailable:
                log.error("gateway audit log unwritable: refusing the call")
                raise _context_unavailable() from None
            return _envelope_result(ErrorCode.INVALID_SCHEMA, audit_id)
        confirmation: str | None = None
        if tool in self.confirmed:
            pending = self._pending(tool, arguments, caller)
            # Arguments that cannot even be normalized fail the upstream's schema check,
            # which comes before its confirmation gate: nothing to ask a human about.
            if pending is not None:
                outcome = await self._confirm(ctx, params, pending, purpose)
                if isinstance(outcome, types.InputRequiredResult | types.CallToolResult):
                    return outcome
                confirmation = outcome
        # Minted once the human answered: a slow answer must not outlive the token.
        meta: dict[str, Any] = {INVOCATION_META_KEY: self._invocation(caller, purpose)}
        if confirmation is not None:
            meta[CONFIRMATION_META_KEY] = confirmation
        try:
            return await self.upstream.call_tool(tool, arguments, meta)
        except UpstreamUnavailable as failure:
            audit_id = self._record(
                "upstream_unavailable", reason=failure.reason, caller=caller, tool=tool
            )
            unknown = failure.sent and tool in MUTATIONS
            code = ErrorCode.MUTATION_OUTCOME_UNKNOWN if unknown else ErrorCode.STORE_UNAVAILABLE
            return _envelope_result(code, audit_id)

    def _pending(
        self, tool: str, arguments: Mapping[str, Any] | None, caller: Caller
    ) -> confirm.PendingCall | None:
        try:
            normalized = normalize(dict(arguments or {}))
        except NonCanonicalValue:
            return None
        assert isinstance(normalized, dict)
        digest = operation_digest(tool, normalized)
        field = _TARGET_ARGUMENT.get(tool)
        target = digest if field is None else normalized.get(field)
        # The human reads the target: only an id of the shape the server emits is shown (a
        # model-written one could carry a misleading sentence). Any other cannot name a
        # record or candidate; unconfirmed, the server refuses it.
        if not isinstance(target, str) or not _SHOWN_TARGET.fullmatch(target):
            return None
        return confirm.PendingCall(tool, target, digest, caller)

    async def _confirm(
        self,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        pending: confirm.PendingCall,
        purpose: str,
    ) -> str | types.CallToolResult | types.InputRequiredResult:
        """The confirmation token, the `input_required` answer that asks for it, or the
        `gate_failed` result of a refusal."""
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        if modern and params.request_state is not None:
            answer = confirm.answer_from_retry(params, pending, self.states)
        elif not confirm.client_supports_elicitation(ctx):
            answer = confirm.Answer(False, "elicitation_unsupported")
            # The envelope's message is constant (SPEC §2); the operator reads the cause and
            # the fix here, in the client's MCP server log. `tool` is one of the six names.
            log.warning(
                "%s needs a human confirmation, but this MCP client declared no elicitation "
                "support: refused with gate_failed. Use a client that supports MCP elicitation "
                "(form mode) for this tool; see docs/operators/checking-configs.md",
                pending.tool,
            )
        else:
            # Only when a human is asked: what they may see of the target (preview.py).
            shown = await target_preview(
                self.upstream, self.minter, pending.caller, purpose, pending.target
            )
            asked = dataclasses.replace(pending, shown=shown)
            if modern:
                return confirm.input_required(asked, self.states)
            answer = await confirm.elicit_over_channel(
                ctx, asked, self.config.confirmation.timeout_s
            )
        audit_id = self._record(
            "confirmation",
            reason=answer.reason,
            caller=pending.caller,
            tool=pending.tool,
            target=pending.target,
            op_digest=pending.op_digest,
        )
        if not answer.accepted:
            return _envelope_result(ErrorCode.gate_failed, audit_id)
        binding = ConfirmationBinding(
            cap=pending.tool,
            target=pending.target,
            op=pending.op_digest,
            session=pending.caller.session,
            principal=pending.caller.principal,
        )
        asserted = pending.caller.approver_groups
        return mint_confirmation(
            self.signer,
            binding,
            approver=pending.caller.approver,
            approver_groups=None if asserted is None else list(asserted),
        )


class _ConstantErrors:
    """Middleware: only constant JSON-RPC errors leave the gateway (the SDK would echo
    exception text; the upstream's own errors are constant already and pass unchanged)."""

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        try:
            return await call_next(ctx)
        except _GatewayRefusal:
            raise
        except MCPError as error:
            raise MCPError(
                error.error.code, wire_error_message(error.error.code, error.error.message)
            ) from None
        except ValidationError:
            raise _context_unavailable() from None
        except Exception:  # noqa: BLE001 - the wire boundary: nothing leaks
            log.error("gateway request %s failed unexpectedly", ctx.method)
            raise _context_unavailable() from None


def build_gateway_server(
    upstream: Upstream,
    caller_of: Callable[[ServerRequestContext[Any]], Caller],
    config: GatewayConfig,
    audit: GatewayAudit,
) -> Server[Any]:
    """The gateway's low-level SDK `Server` exposing the upstream's tools unchanged.

    Raises:
        ConfigurationError: the signing key cannot be read or is not Ed25519.
    """
    gateway = _Gateway(upstream, caller_of, config, audit)
    server: Server[Any] = Server(
        SERVER_NAME,
        version=package_version(),
        # The same manual as serve's: the agent sees the gateway as the memory server.
        instructions=instructions(configured_language()),
        on_list_tools=gateway.list_tools,
        on_call_tool=gateway.call_tool,
        # As mcp_server.py: the 2026 HTTP path would otherwise call on_list_tools without a
        # caller to find schemas for header validation; the upstream validates arguments.
        get_tool_input_schema=lambda name: None,
    )
    # Only ours: the default tracing middleware costs time on every call for nothing here.
    server.middleware[:] = [_ConstantErrors()]
    return server
