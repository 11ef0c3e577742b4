"""The floor of a transport: an MCP server whose one tool does nothing but answer.

Usage: python -m bench.floor_server stdio | http PORT

Built with the same SDK low-level `Server`, worker pool hop and uvicorn settings as the real
server (engram_memory.server.mcp_wiring), so the time a benchmark measures against it is what the
transport and the SDK cost, and the difference to a real tool is the service's own cost.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from engram_memory.transport.http_serving import HealthProbe
from engram_memory.transport.stopping import GracefulStop

TOOL = "floor_echo"
_WORKERS = anyio.CapacityLimiter(4)


def _answer(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "output": {"value": {"echo": arguments.get("n", 0)}}}


def build() -> Server[Any]:
    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
        return types.ListToolsResult(
            tools=[types.Tool(name=TOOL, description="answers at once", input_schema=schema)]
        )

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # The same hop to a worker thread as a real call takes.
        envelope = await anyio.to_thread.run_sync(_answer, params.arguments or {}, limiter=_WORKERS)
        return types.CallToolResult(
            content=[types.TextContent(text='{"ok":true}')], structured_content=envelope
        )

    return Server(
        "engram-floor",
        version="0",
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        get_tool_input_schema=lambda name: None,
    )


async def _stdio() -> None:
    server = build()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> int:
    if sys.argv[1:2] == ["stdio"]:
        anyio.run(_stdio)
        return 0
    port = int(sys.argv[2])
    app = build().streamable_http_app(
        streamable_http_path="/mcp", json_response=False, host="127.0.0.1"
    )
    # The real server's health probe in front, as in serve: the start-up wait
    # (`wait_until_listening`) asks /healthz, and every MCP request passes the same check.
    probed = HealthProbe(app, GracefulStop())
    uvicorn.Server(
        uvicorn.Config(probed, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    ).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
