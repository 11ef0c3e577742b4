"""The stdio fast path: a plain `tools/call` answered without the SDK server's dispatch.

Issue 11 gives the gateway 1 ms per call over the upstream. The SDK's server dispatch (a
task, contexts, the request validated against the version's surface and the params model,
the result dumped, validated and dumped again) costs about 1 ms of CPU per call on its own
on the 2-core bench machine (bench/results/gateway.md), so in stdio mode the transport
(pipes.py) offers each request here first, and the calls that need nothing but a binding
are answered directly:

- only `tools/call` of the handshake era, when the client negotiated the same protocol
  version as the gateway's child session (the child's result is then already shaped for
  the client's version, and is passed on as the child's JSON object, unchanged);
- only a tool that needs no human confirmation, with `name`, `arguments` (an object) and
  `_meta` and nothing else in its params;
- only when the declared purpose is the caller's (the same `bound_purpose` as server.py).

Everything else returns None and takes the SDK path in server.py unchanged: refusals and
their audit, confirmations and elicitation, tools/list, the 2026 era, anything unusual. The
call itself is the same as server.py's: a fresh invocation token per call, the client's
`_meta` never forwarded, the arguments (with the agent's `idempotency_key`) as received, an
upstream that did not answer turned into the same audited retriable envelope, an upstream
JSON-RPC error passed on with its code and constant message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from engram_memory.contract.errors import ErrorCode, ProtocolCode, wire_error_message
from engram_memory.contract.exceptions import GatewayAuditUnavailable, UpstreamUnavailable
from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.caller import Caller
from engram_memory.gateway.config import GatewayConfig
from engram_memory.gateway.minting import InvocationMinter
from engram_memory.gateway.server import (
    MUTATIONS,
    _envelope_result,
    bound_purpose,
    duplicate_arguments_refused,
    purpose_argument,
    refuse_duplicate_arguments,
)
from engram_memory.gateway.upstream import Upstream
from engram_memory.host.context import INVOCATION_META_KEY
from engram_memory.host.keys import HostSigningKey

log = logging.getLogger("engram_memory.gateway")

Answer = types.JSONRPCResponse | types.JSONRPCError
_PARAMS = frozenset({"name", "arguments", "_meta"})
# A 2026-era request carries its protocol version in `_meta` under this prefix.
_MODERN_META_PREFIX = "io.modelcontextprotocol/"


def _error(request_id: types.RequestId, code: int, message: str) -> types.JSONRPCError:
    error = types.ErrorData(code=code, message=wire_error_message(code, message))
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


class FastCalls:
    """Answers the plain calls of the one stdio caller (see the module docstring)."""

    def __init__(
        self, upstream: Upstream, caller: Caller, config: GatewayConfig, audit: GatewayAudit
    ) -> None:
        self.upstream = upstream
        self.caller = caller
        self.audit = audit
        self.minter = InvocationMinter(
            HostSigningKey.from_pem_file(config.signing_key), config.host_id
        )
        self.confirmed = config.confirmed_tools

    def take(
        self, request: types.JSONRPCRequest, client_version: str | None
    ) -> Awaitable[Answer] | None:
        """The answer to `request` if the fast path takes it, None for the SDK path."""
        params = request.params
        if (
            request.method != "tools/call"
            or client_version is None
            or client_version != self.upstream.child_version()
            or not isinstance(params, dict)
            or not params.keys() <= _PARAMS
        ):
            return None
        tool, arguments, meta = params.get("name"), params.get("arguments"), params.get("_meta")
        if not isinstance(tool, str) or tool in self.confirmed:
            return None
        if arguments is not None and not isinstance(arguments, dict):
            return None
        if meta is not None and not isinstance(meta, dict):
            return None
        if meta and any(key.startswith(_MODERN_META_PREFIX) for key in meta):
            return None
        purpose = bound_purpose(self.caller, purpose_argument(tool, arguments))
        if purpose is None:
            return None  # refused and audited by the SDK path
        if duplicate_arguments_refused(tool):
            return self._refuse_duplicates(request.id, tool)
        return self._answer(request.id, tool, arguments, purpose)

    async def _refuse_duplicates(self, request_id: types.RequestId, tool: str) -> Answer:
        """The `INVALID_SCHEMA` envelope of a call with a duplicate argument key (server.py
        explains), nothing sent upstream."""
        try:
            audit_id = refuse_duplicate_arguments(self.audit, self.caller, tool)
        except GatewayAuditUnavailable:
            log.error("gateway audit log unwritable: refusing the call")
            code = ProtocolCode.CONTEXT_UNAVAILABLE
            return _error(request_id, code.rpc_code, code.message)
        return _result(request_id, _envelope_result(ErrorCode.INVALID_SCHEMA, audit_id))

    async def _answer(
        self,
        request_id: types.RequestId,
        tool: str,
        arguments: Mapping[str, Any] | None,
        purpose: str,
    ) -> Answer:
        meta = {INVOCATION_META_KEY: self.minter.mint(self.caller, purpose)}
        try:
            result = await self.upstream.call_tool_json(tool, arguments, meta)
        except UpstreamUnavailable as failure:
            return self._unavailable(request_id, tool, failure)
        except MCPError as error:
            return _error(request_id, error.error.code, error.error.message)
        except Exception:  # noqa: BLE001 - the wire boundary: nothing leaks (as server.py)
            log.error("gateway request tools/call failed unexpectedly")
            code = ProtocolCode.CONTEXT_UNAVAILABLE
            return _error(request_id, code.rpc_code, code.message)
        return types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)

    def _unavailable(
        self, request_id: types.RequestId, tool: str, failure: UpstreamUnavailable
    ) -> Answer:
        try:
            audit_id = self.audit.record(
                "upstream_unavailable", reason=failure.reason, caller=self.caller, tool=tool
            )
        except GatewayAuditUnavailable:
            log.error("gateway audit log unwritable: refusing the call")
            code = ProtocolCode.CONTEXT_UNAVAILABLE
            return _error(request_id, code.rpc_code, code.message)
        unknown = failure.sent and tool in MUTATIONS
        failure_code = (
            ErrorCode.MUTATION_OUTCOME_UNKNOWN if unknown else ErrorCode.STORE_UNAVAILABLE
        )
        return _result(request_id, _envelope_result(failure_code, audit_id))


def _result(request_id: types.RequestId, result: types.CallToolResult) -> Answer:
    wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    wire.pop("resultType", None)  # a 2026 field: this path serves the handshake era only
    return types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=wire)
