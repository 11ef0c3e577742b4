"""MCP wiring only: the SDK's low-level `Server`, over stdio or streamable HTTP.

Everything that decides lives in `tools/`; this module turns `tools/list` and `tools/call` into
`MemoryService` calls, envelopes into `CallToolResult`s, and refusals into JSON-RPC errors with
constant messages and no data. With stdio_serving.py (the stdio session's streams) it is
the only code that imports the MCP SDK's server side.

Nothing reaches the SDK's parser unjudged: every stdio line (stdin_lines.py) and HTTP body
(json_gate_http.py) passes the strict JSON gate (json_gate.py) first, and the gate's
refusals are answered here; on the way out every JSON-RPC error is made constant.

The streamable HTTP server is in mcp_http.py, imported only for `--transport http`, so a
stdio server never loads the HTTP stack (uvicorn, our guard and drain).

Both transports stop gracefully (stopping.py): over stdio a stop signal ends the reading of
requests, waits (bounded) until every request read has been answered, then ends the session
as if stdin had closed; over HTTP, http_serving.py drains the POSTs in flight.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from engram_memory import package_version
from engram_memory.contract.agent_manual import instructions
from engram_memory.contract.errors import ProtocolCode, wire_error_message
from engram_memory.contract.exceptions import ProtocolRefusal
from engram_memory.contract.refusals import PreBindingRefusal, RefusalReason
from engram_memory.server.service_opening import ServiceOpening
from engram_memory.transport.http_settings import DEFAULT_MAX_REQUEST_BYTES
from engram_memory.transport.json_gate import ARGUMENT_DEFECT, GateRefusal, protocol_method
from engram_memory.transport.json_gate_http import mark_handler_reached
from engram_memory.transport.stdin_lines import RefusalAnswer, StdinLines
from engram_memory.transport.stdio_serving import CountingReads, CountingWrites, stop_on_signal
from engram_memory.transport.stopping import GracefulStop

if TYPE_CHECKING:  # for annotations only: the SDK's stream protocols, and the service,
    # whose modules (store, policy, search) the opening imports on its own thread, so that
    # `initialize` is answered as soon as the SDK is loaded (service_opening.py)
    from mcp.shared._stream_protocols import WriteStream

    from engram_memory.contract.schemas import ToolSpec
    from engram_memory.tools.dispatch import MemoryService

log = logging.getLogger("engram_memory.mcp")

SERVER_NAME = "engram-memory"
# DuckDB serializes writes anyway; a small pool keeps policy I/O overlapping without piling up.
_WORKER_LIMIT = anyio.CapacityLimiter(4)


class _ServiceRefusal(MCPError):
    """A refusal `MemoryService` decided (and audits itself); the SDK's own are `MCPError`."""


# -32603's message is constant (SPEC §1.7); the operator reads what to do in the log, once
# per cause and process (a client retrying in a loop must not flood it).
_NEXT_STEP = {
    RefusalReason.TOKEN_MISSING.value: (
        "a request carried no signed invocation context and was refused (-32603): a stock "
        "MCP client reaches this server through `engram-memory gateway`, which signs every "
        "call; see docs/operators/checking-configs.md"
    ),
    RefusalReason.TOKEN_INVALID.value: (
        "a request's invocation context did not verify and was refused (-32603): is its "
        "signer's public key in ENGRAM_HOST_KEYS (host-keys.pem beside the gateway's "
        "signing_key)? see docs/operators/checking-configs.md"
    ),
}
_explained: set[str] = set()


def _explain(refusal: ProtocolRefusal) -> None:
    step = _NEXT_STEP.get(refusal.detail)
    if step is not None and refusal.detail not in _explained:
        _explained.add(refusal.detail)
        log.warning("%s", step)


def _rpc_error(code: ProtocolCode) -> MCPError:
    return _ServiceRefusal(code.rpc_code, code.message)


# The SDK's refusals of a request before any handler ran, as the host-level audit names them.
_SDK_REFUSAL_REASONS = {
    types.METHOD_NOT_FOUND: RefusalReason.METHOD_NOT_FOUND,
    types.INVALID_PARAMS: RefusalReason.INVALID_REQUEST,
    types.INVALID_REQUEST: RefusalReason.INVALID_REQUEST,
}


def _constant_mcp_error(error: types.ErrorData) -> MCPError:
    return MCPError(error.code, wire_error_message(error.code, error.message))


def sdk_accepts(message: object) -> bool:
    """Whether the SDK's own message model takes `message` (after the JSON gate passed it)."""
    try:
        types.jsonrpc_message_adapter.validate_python(message, by_name=False)
    except ValidationError:
        return False
    return True


class _ConstantErrors:
    """Middleware: nothing but our constant protocol errors leaves the server.

    The SDK would otherwise echo `str(exc)` on the 2025-11-25 era, which can carry paths,
    SQL or content; here any unexpected exception becomes the constant -32603. The SDK's own
    errors lose their data and any interpolated message (-32601 would echo the method name),
    and are recorded as refusals before binding (the service records its own).
    """

    def __init__(self, opening: ServiceOpening) -> None:
        self._opening = opening

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        mark_handler_reached(ctx.request)  # audited here and below, not again by the gate
        try:
            return await call_next(ctx)
        except _ServiceRefusal:
            raise
        except MCPError as error:
            reason = _SDK_REFUSAL_REASONS.get(error.error.code)
            if reason is not None:
                await self._audit(ctx, reason)
            raise _constant_mcp_error(error.error) from None
        except ValidationError:
            # The SDK's model of the method's params refused them: a client error, not ours.
            await self._audit(ctx, RefusalReason.INVALID_REQUEST)
            raise _rpc_error(ProtocolCode.CONTEXT_UNAVAILABLE) from None
        except Exception:  # noqa: BLE001 - the wire boundary: nothing leaks
            log.error("request %s failed unexpectedly", protocol_method(ctx.method))
            raise _rpc_error(ProtocolCode.CONTEXT_UNAVAILABLE) from None

    async def _audit(self, ctx: ServerRequestContext[Any], reason: RefusalReason) -> None:
        client = getattr(ctx.request, "client", None)  # a Starlette request over HTTP
        transport, peer = ("http", str(client.host)) if client is not None else ("stdio", "stdio")
        from engram_memory.host.context import INVOCATION_META_KEY

        token = _meta_value(ctx.meta, INVOCATION_META_KEY)
        refusal = PreBindingRefusal(transport, peer, protocol_method(ctx.method), reason, token)
        service = await self._opening.service()
        await anyio.to_thread.run_sync(
            service.refused_before_binding, refusal, limiter=_WORKER_LIMIT
        )


def _tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=dict(spec.input_schema),
        output_schema=dict(spec.output_schema),
        annotations=types.ToolAnnotations(**spec.annotations),
    )


def _meta_value(meta: Mapping[str, Any] | None, key: str) -> object:
    return None if meta is None else meta.get(key)


def _peer(ctx: ServerRequestContext[Any], transport: str) -> str:
    """The client's address as the audit records it: the IP over HTTP (the SDK attaches
    the Starlette request), "stdio" over stdio."""
    if transport != "http":
        return transport
    client = getattr(ctx.request, "client", None)
    host = getattr(client, "host", None)
    return host if isinstance(host, str) and host else "unknown"


def build_server(
    service: MemoryService | ServiceOpening,
    stop: GracefulStop | None = None,
    transport: str = "stdio",
    language: str = "en",
) -> Server[Any]:
    """The MCP server of `service` over `transport` ("stdio" or "http"); an abandoned drain
    of `stop` cancels its calls; `initialize` carries the agent's manual in `language`
    (contract/agent_manual.py). Given a `ServiceOpening`, `tools/list` and `tools/call` wait
    until the service is open; everything else is answered at once."""
    stop = stop or GracefulStop()
    opening = service if isinstance(service, ServiceOpening) else ServiceOpening(service)

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        opened = await opening.service()  # imports what the lines below use
        from engram_memory.host.context import INVOCATION_META_KEY

        token = _meta_value(ctx.meta, INVOCATION_META_KEY)
        list_tools = partial(opened.list_tools, transport=transport, peer=_peer(ctx, transport))
        try:
            specs = await anyio.to_thread.run_sync(list_tools, token, limiter=_WORKER_LIMIT)
        except ProtocolRefusal as refusal:
            _explain(refusal)
            raise _rpc_error(refusal.code) from None
        return types.ListToolsResult(tools=[_tool(spec) for spec in specs])

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        opened = await opening.service()  # imports what the lines below use
        from engram_memory.contract.envelope import envelope_json
        from engram_memory.host.confirmation import CONFIRMATION_META_KEY
        from engram_memory.host.context import INVOCATION_META_KEY
        from engram_memory.tools.dispatch import CallRequest

        cancellation = threading.Event()
        request = CallRequest(
            tool=params.name,
            arguments=params.arguments if params.arguments is not None else {},
            invocation_token=_meta_value(params.meta, INVOCATION_META_KEY),
            confirmation_token=_meta_value(params.meta, CONFIRMATION_META_KEY),
            cancellation=cancellation,
            # Set by the JSON gate for this very message (json_gate.py explains why a
            # context variable): the client cannot set it.
            argument_defect=ARGUMENT_DEFECT.get(),
            transport=transport,
            peer=_peer(ctx, transport),
        )

        def answer() -> tuple[dict[str, Any], str]:
            # The envelope's text is made on the worker too: it grows with the answer (a
            # search page), and the event loop meanwhile reads and writes other requests.
            envelope = opened.call_tool(request)
            return envelope, envelope_json(envelope)

        try:
            with stop.cancellable(cancellation):
                envelope, text = await anyio.to_thread.run_sync(
                    answer, limiter=_WORKER_LIMIT, abandon_on_cancel=True
                )
        except anyio.get_cancelled_exc_class():
            # The client cancelled (the SDK sends no response): the worker stops with
            # CANCELLED at its next check before commit, and its envelope is discarded.
            cancellation.set()
            raise
        except ProtocolRefusal as refusal:
            _explain(refusal)
            raise _rpc_error(refusal.code) from None
        return types.CallToolResult(
            content=[types.TextContent(text=text)],
            structured_content=envelope,
            is_error=not envelope["ok"],
        )

    server: Server[Any] = Server(
        SERVER_NAME,
        version=package_version(),
        instructions=instructions(language),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        # The 2026 HTTP path would otherwise call on_list_tools without our context to find
        # schemas for header validation; we validate arguments ourselves.
        get_tool_input_schema=lambda name: None,
    )
    server.middleware.append(_ConstantErrors(opening))
    return server


# -- stdio -------------------------------------------------------------------------------


def _refusal_answerer(
    opening: ServiceOpening, write_stream: WriteStream[SessionMessage]
) -> RefusalAnswer:
    """Answer a refused stdio line on the wire, then record it in the host-level stream."""

    async def answer(refusal: GateRefusal) -> None:
        # Straight to the SDK's writer, not through CountingWrites: the refusal's id (if
        # any) must not end the flight of a request that shares it.
        await write_stream.send(SessionMessage(types.JSONRPCError.model_validate(refusal.answer())))
        await audit_refusal(await opening.service(), refusal, "stdio", "stdio")

    return answer


async def audit_refusal(
    service: MemoryService, refusal: GateRefusal, transport: str, peer: str
) -> None:
    record = PreBindingRefusal(transport, peer, refusal.method, refusal.reason, refusal.token)
    await anyio.to_thread.run_sync(service.refused_before_binding, record, limiter=_WORKER_LIMIT)


async def serve_stdio(
    service: MemoryService | ServiceOpening,
    stop: GracefulStop | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    language: str = "en",
) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin or a stop signal drained; a
    line longer than `max_request_bytes` is answered -32600 and never kept.

    Given a `ServiceOpening`, reading starts at once and the opening runs beside the session;
    if it fails, the session ends with no call answered (the failure is on the opening)."""
    stop = stop or GracefulStop()
    opening = service if isinstance(service, ServiceOpening) else ServiceOpening(service)
    server = build_server(opening, stop, "stdio", language)
    lines = StdinLines(sys.stdin.fileno(), accepts=sdk_accepts, max_bytes=max_request_bytes)
    lines.start()
    # The SDK only iterates what it is given as stdin, which is all `StdinLines` offers.
    stdin = cast("anyio.AsyncFile[str]", lines)
    async with (
        stdio_server(stdin=stdin) as (read_stream, write_stream),
        anyio.create_task_group() as group,
    ):
        lines.answer_refusals(_refusal_answerer(opening, write_stream))
        group.start_soon(stop_on_signal, stop, lines)
        group.start_soon(_end_unless_opened, opening, lines, group.cancel_scope)
        writes = CountingWrites(write_stream, stop)
        try:
            await server.run(
                CountingReads(read_stream, stop), writes, server.create_initialization_options()
            )
        finally:
            opening.answered_a_client = writes.answers > 0
        group.cancel_scope.cancel()


async def _end_unless_opened(
    opening: ServiceOpening, lines: StdinLines, session: anyio.CancelScope
) -> None:
    if not await opening.open():
        # Fail closed: no further line is read, the calls waiting on the service stay
        # unanswered, and the session ends as if stdin had closed.
        lines.end()
        session.cancel()
