"""Shared by the side-by-side benchmark: a stdio MCP server's process, its memory, timed calls.

A server is started through `sh -c 'exec ... 2>>LOG'` so its stderr (Basic Memory and the
reference server log there) goes to a file instead of the benchmark's progress, and `exec`
keeps the PID that `/proc` reports for the server itself.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import StdioServerParameters
from mcp.client.client import Client

_PAGE_KB = 1024


def quiet_server(
    command: str, args: Sequence[str], env: dict[str, str], log: Path, cwd: Path | None = None
) -> StdioServerParameters:
    """Parameters starting `command args` with its stderr appended to `log`."""
    script = 'exec "$0" "$@" 2>>"$ENGRAM_BENCH_SERVER_LOG"'
    return StdioServerParameters(
        command="/bin/sh",
        args=["-c", script, command, *args],
        env={**env, "ENGRAM_BENCH_SERVER_LOG": str(log)},
        cwd=str(cwd) if cwd else None,
    )


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def server_pid(marker: str) -> int:
    """The PID of this process's child whose command line contains `marker`.

    Raises:
        LookupError: no such child (the server has not started or has exited).
    """
    for child in _children(os.getpid()):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline:
            return child
    raise LookupError(f"no child process running {marker}")


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of `pid` and all its descendants (VmRSS from /proc)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * _PAGE_KB
        except OSError:
            continue
        pending += _children(current)
    return total


def directory_bytes(path: Path) -> int:
    """Bytes of every regular file under `path` (the data a system keeps on disk)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def timed_calls(
    call: Callable[[str], Awaitable[int]], queries: Sequence[str], label: str, warmup: int = 10
) -> tuple[list[float], list[int]]:
    """Run `call(query)` for each query (after `warmup` untimed ones); return the latencies
    in ms and the number of hits each call reported, in query order."""
    for query in queries[:warmup]:
        await call(query)
    latencies: list[float] = []
    hits: list[int] = []
    step = max(1, len(queries) // 5)
    for n, query in enumerate(queries, 1):
        start = time.perf_counter()
        hits.append(await call(query))
        latencies.append((time.perf_counter() - start) * 1000)
        if n % step == 0:
            progress(f"    {label}: {n}/{len(queries)} queries")
    return latencies, hits


async def call_tool(client: Client, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """One raw tools/call (no client-side output validation, which would re-list tools).

    Raises:
        RuntimeError: the server answered with a tool error.
    """
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(name=name, arguments=arguments)
    )
    result = await client.session.send_request(request, types.CallToolResult)
    if result.is_error:
        raise RuntimeError(f"{name} answered with an error")
    return result
