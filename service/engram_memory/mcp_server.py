"""MCP wiring only: the SDK's low-level `Server`, over stdio or streamable HTTP.

Everything that decides lives in `tools/`; this module turns `tools/list` and `tools/call` into
`MemoryService` calls, envelopes into `CallToolResult`s, and refusals into JSON-RPC errors with
constant messages and no data. It is the only module that imports the MCP SDK.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from engram_memory.contract.envelope import envelope_json
from engram_memory.contract.errors import ProtocolCode, ProtocolRefusal
from engram_memory.contract.schemas import ToolSpec
from engram_memory.host.confirmation import CONFIRMATION_META_KEY
from engram_memory.host.context import INVOCATION_META_KEY
from engram_memory.tools.dispatch import CallRequest, MemoryService

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


def build_server(service: MemoryService) -> Server[Any]:
    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        token = _meta_value(ctx.meta, INVOCATION_META_KEY)
        try:
            specs = await anyio.to_thread.run_sync(service.list_tools, token, limiter=_WORKER_LIMIT)
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
        )
        try:
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


async def serve_stdio(service: MemoryService) -> None:
    server = build_server(service)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_server(service: MemoryService, host: str, port: int) -> uvicorn.Server:
    """A uvicorn server for streamable HTTP at `/mcp` (build a new one per start)."""
    # Not json_response: a quick call still answers with plain JSON, but a call that runs on
    # is streamed, so a client closing the stream (how the 2026 era cancels) cancels it.
    app = build_server(service).streamable_http_app(
        streamable_http_path="/mcp", json_response=False, host=host
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)
