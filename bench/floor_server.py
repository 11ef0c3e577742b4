"""The floor of a transport: an MCP server whose one tool does nothing but answer.

Usage: python -m bench.floor_server stdio | http PORT

Over stdio: the SDK's low-level `Server` with the same worker pool hop as the real server.
Over HTTP: the real server's own stack (engram_memory.server.mcp_http: connection guard,
drain, strict JSON gate, constant errors, the SDK app, the worker hop and the envelope's
text) around a stand-in service whose one tool does nothing, so that what a benchmark
measures against it is what our transport and the SDK cost, and the difference to a real
tool is the service's own cost (ENGRAM_HOST_KEYS names the trusted keys, as for `serve`).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from engram_memory.contract.schemas import ToolSpec
from engram_memory.host.keys import HostKeyring

if TYPE_CHECKING:  # the service's modules stay out of the stdio floor's start-up
    from engram_memory.contract.refusals import PreBindingRefusal
    from engram_memory.tools.dispatch import CallRequest, MemoryService

TOOL = "floor_echo"
_WORKERS = anyio.CapacityLimiter(4)


def _answer(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "output": {"value": {"echo": arguments.get("n", 0)}}}


class _FloorServices:
    """What the HTTP transport reads of the service's wiring: the trusted keys and a clock."""

    def __init__(self, host_keys: HostKeyring) -> None:
        self.host_keys = host_keys

    def clock_ms(self) -> int:
        return int(time.time() * 1000)


class FloorService:
    """Stands in for `MemoryService` behind the real transport: one tool, which answers at
    once (no token check, no store, no policy: the service's whole cost left out)."""

    def __init__(self, host_keys: HostKeyring) -> None:
        self.services = _FloorServices(host_keys)

    def call_tool(self, request: CallRequest) -> dict[str, Any]:
        return _answer(dict(request.arguments))

    def list_tools(self, token: object, *, transport: str, peer: str) -> list[ToolSpec]:
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
        return [ToolSpec(TOOL, TOOL, "answers at once", {}, schema, {"type": "object"})]

    def refused_before_binding(self, refusal: PreBindingRefusal) -> None:
        return None


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
    from engram_memory.server.mcp_http import http_server  # the HTTP stack: only here
    from engram_memory.transport.http_serving import listen

    port = int(sys.argv[2])
    keyring = HostKeyring.from_file(Path(os.environ["ENGRAM_HOST_KEYS"]))
    service = cast("MemoryService", FloorService(keyring))
    listener = listen("127.0.0.1", port)
    http_server(service, "127.0.0.1", port).run(sockets=[listener])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
