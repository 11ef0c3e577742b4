"""MCP wiring only: the SDK's low-level `Server`, over stdio or streamable HTTP.

Everything that decides lives in `tools/`; this module turns `tools/list` and `tools/call` into
`MemoryService` calls, envelopes into `CallToolResult`s, and refusals into JSON-RPC errors with
constant messages and no data. It is the only module that imports the MCP SDK.

Both transports stop gracefully (stopping.py): over stdio a stop signal ends the reading of
requests, waits (bounded) until every request read has been answered, then ends the session
as if stdin had closed; over HTTP, http_serving.py drains the POSTs in flight.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from engram_memory.contract.envelope import envelope_json
from engram_memory.contract.errors import ProtocolCode, ProtocolRefusal
from engram_memory.contract.schemas import ToolSpec
from engram_memory.host.confirmation import CONFIRMATION_META_KEY
from engram_memory.host.context import INVOCATION_META_KEY
from engram_memory.http_serving import AdmitWhileServing, DrainingServer
from engram_memory.stopping import GracefulStop
from engram_memory.tools.dispatch import CallRequest, MemoryService

if TYPE_CHECKING:  # the SDK's stream protocols, for annotations only
    from mcp.shared._stream_protocols import ReadStream, WriteStream

log = logging.getLogger("engram_memory.mcp")

SERVER_NAME = "engram-memory"
# DuckDB serializes writes anyway; a small pool keeps policy I/O overlapping without piling up.
_WORKER_LIMIT = anyio.CapacityLimiter(4)


def _rpc_error(code: ProtocolCode) -> MCPError:
    return MCPError(code.rpc_code, code.message)


class _ConstantErrors:
    """Middleware: nothing but our constant protocol errors leaves the server.

    The SDK would otherwise echo `str(exc)` on the 2025-11-25 era, which can carry paths,
    SQL or content; here any unexpected exception becomes the constant -32603.
    """

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        try:
            return await call_next(ctx)
        except MCPError:
            raise
        except (ValidationError, Exception):  # noqa: BLE001 - the wire boundary: nothing leaks
            log.error("request %s failed unexpectedly", ctx.method)
            raise _rpc_error(ProtocolCode.CONTEXT_UNAVAILABLE) from None


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
    service: MemoryService, stop: GracefulStop | None = None, transport: str = "stdio"
) -> Server[Any]:
    """The MCP server of `service` over `transport` ("stdio" or "http"); an abandoned drain
    of `stop` cancels its calls."""
    stop = stop or GracefulStop()

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        token = _meta_value(ctx.meta, INVOCATION_META_KEY)
        list_tools = partial(service.list_tools, transport=transport, peer=_peer(ctx, transport))
        try:
            specs = await anyio.to_thread.run_sync(list_tools, token, limiter=_WORKER_LIMIT)
        except ProtocolRefusal as refusal:
            raise _rpc_error(refusal.code) from None
        return types.ListToolsResult(tools=[_tool(spec) for spec in specs])

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        cancellation = threading.Event()
        request = CallRequest(
            tool=params.name,
            arguments=params.arguments if params.arguments is not None else {},
            invocation_token=_meta_value(params.meta, INVOCATION_META_KEY),
            confirmation_token=_meta_value(params.meta, CONFIRMATION_META_KEY),
            cancellation=cancellation,
            transport=transport,
            peer=_peer(ctx, transport),
        )
        try:
            with stop.cancellable(cancellation):
                envelope = await anyio.to_thread.run_sync(
                    service.call_tool, request, limiter=_WORKER_LIMIT, abandon_on_cancel=True
                )
        except anyio.get_cancelled_exc_class():
            # The client cancelled (the SDK sends no response): the worker stops with
            # CANCELLED at its next check before commit, and its envelope is discarded.
            cancellation.set()
            raise
        except ProtocolRefusal as refusal:
            raise _rpc_error(refusal.code) from None
        return types.CallToolResult(
            content=[types.TextContent(text=envelope_json(envelope))],
            structured_content=envelope,
            is_error=not envelope["ok"],
        )

    server: Server[Any] = Server(
        SERVER_NAME,
        version=_version(),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        # The 2026 HTTP path would otherwise call on_list_tools without our context to find
        # schemas for header validation; we validate arguments ourselves.
        get_tool_input_schema=lambda name: None,
    )
    server.middleware.append(_ConstantErrors())
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("engram-memory")
    except PackageNotFoundError:
        return "0.0.0"


# -- stdio -------------------------------------------------------------------------------


class _StdinLines:
    """Lines of stdin, read on a daemon thread so that a stop never waits on an idle client.

    (The SDK reads stdin in an anyio worker thread that cancellation cannot abandon and that
    would hold the process at exit.) Once a stop begins no further line is taken; `end`
    then closes the session as if the client had closed stdin.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._send, self._receive = anyio.create_memory_object_stream[str](0)
        self._reading = True
        self._waiting: anyio.CancelScope | None = None
        self._ended = anyio.Event()

    def start(self) -> None:
        token = anyio.lowlevel.current_token()
        threading.Thread(target=self._pump, args=(token,), name="engram-stdin", daemon=True).start()

    def _pump(self, token: anyio.lowlevel.EventLoopToken) -> None:
        try:
            for line in _text_lines(self._fd):
                anyio.from_thread.run(self._send.send, line, token=token)
            anyio.from_thread.run(self._send.aclose, token=token)
        except (
            RuntimeError,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            asyncio.CancelledError,
            concurrent.futures.CancelledError,
        ):
            return  # the session ended first; nobody waits for more lines

    def stop_reading(self) -> None:
        self._reading = False
        if self._waiting is not None:
            self._waiting.cancel()
        # A line the pump is handing over when the stop begins would wait forever (the
        # stream has no buffer) and be cancelled, noisily, as the loop shuts down; closing
        # our end turns that wait into BrokenResourceError, which the pump expects.
        self._receive.close()

    def end(self) -> None:
        self.stop_reading()
        self._ended.set()

    def __aiter__(self) -> _StdinLines:
        return self

    async def __anext__(self) -> str:
        if self._reading:
            with anyio.CancelScope() as self._waiting:
                try:
                    return await self._receive.receive()
                except anyio.EndOfStream:
                    raise StopAsyncIteration from None
        await self._ended.wait()
        raise StopAsyncIteration


def _text_lines(fd: int) -> Iterator[str]:
    """Lines of `fd`, read raw: a buffered reader's lock, held by a daemon thread blocked in
    a read, would abort the interpreter at exit."""
    pending = b""
    while chunk := os.read(fd, 65_536):
        pending += chunk
        if b"\n" not in chunk:
            continue  # a long message: split once its line is complete
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", errors="replace") + "\n"
    if pending:
        yield pending.decode("utf-8", errors="replace")


def _in_flight_key(request_id: object) -> tuple[str, object]:
    return ("rpc", request_id)


class _CountingReads:
    """The session's read side: each request read counts in flight until it is answered."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], stop: GracefulStop) -> None:
        self._inner, self._stop = inner, stop

    @property
    def last_context(self) -> object:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        item = await self._inner.receive()
        if isinstance(item, SessionMessage):
            message = item.message
            if isinstance(message, types.JSONRPCRequest):
                self._stop.enter(_in_flight_key(message.id))
            elif isinstance(message, types.JSONRPCNotification) and (
                message.method == "notifications/cancelled"
            ):
                # A cancelled request is never answered (SPEC §1.8).
                params = message.params if isinstance(message.params, dict) else {}
                self._stop.leave(_in_flight_key(params.get("requestId")))
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _CountingReads:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _CountingReads:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _CountingWrites:
    """The session's write side: an answer handed to the writer ends its request's flight."""

    def __init__(self, inner: WriteStream[SessionMessage], stop: GracefulStop) -> None:
        self._inner, self._stop = inner, stop

    async def send(self, item: SessionMessage, /) -> None:
        await self._inner.send(item)
        if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
            self._stop.leave(_in_flight_key(item.message.id))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _CountingWrites:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def _stop_on_signal(stop: GracefulStop, lines: _StdinLines) -> None:
    """First SIGTERM/SIGINT: read no more, let the answers owed go out (bounded), end."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as group:
            async for _signal in signals:
                first = not stop.stopping
                stop.request()
                if first:
                    lines.stop_reading()
                    group.start_soon(_end_when_drained, stop, lines)


async def _end_when_drained(stop: GracefulStop, lines: _StdinLines) -> None:
    await anyio.to_thread.run_sync(stop.wait_drained)
    lines.end()


async def serve_stdio(service: MemoryService, stop: GracefulStop | None = None) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin or a stop signal drained."""
    stop = stop or GracefulStop()
    server = build_server(service, stop, "stdio")
    lines = _StdinLines(sys.stdin.fileno())
    lines.start()
    # The SDK only iterates what it is given as stdin, which is all `_StdinLines` offers.
    stdin = cast("anyio.AsyncFile[str]", lines)
    async with (
        stdio_server(stdin=stdin) as (read_stream, write_stream),
        anyio.create_task_group() as group,
    ):
        group.start_soon(_stop_on_signal, stop, lines)
        await server.run(
            _CountingReads(read_stream, stop),
            _CountingWrites(write_stream, stop),
            server.create_initialization_options(),
        )
        group.cancel_scope.cancel()


# -- streamable HTTP ----------------------------------------------------------------------


def http_server(
    service: MemoryService,
    host: str,
    port: int,
    stop: GracefulStop | None = None,
) -> uvicorn.Server:
    """A uvicorn server for streamable HTTP at `/mcp` (build a new one per start); run it
    with the socket from `listen`. It prints its URL once it listens."""
    stop = stop or GracefulStop()
    # Not json_response: a quick call still answers with plain JSON, but a call that runs on
    # is streamed, so a client closing the stream (how the 2026 era cancels) cancels it.
    app = build_server(service, stop, "http").streamable_http_app(
        streamable_http_path="/mcp", json_response=False, host=host
    )
    config = uvicorn.Config(
        AdmitWhileServing(app, stop),
        host=host,
        port=port,
        lifespan="on",
        log_level="warning",
        access_log=False,
        # After our own drain only idle streams are left; this bounds their close.
        timeout_graceful_shutdown=3,
    )
    return DrainingServer(config, stop, f"http://{host}:{port}/mcp")
