"""JSON-RPC requests to a child upstream over its stdin/stdout, without the SDK's client.

The SDK's `Client` costs about 1 ms of CPU per call on the 2-core bench machine (a request
model, its dump, a JSON-RPC request model, a tracing span, memory streams and tasks per
request, its stdio transport's writer task and text decoding, then the answer validated
twice), and issue 11 gives the gateway 1 ms for all it adds. The gateway only ever sends
`initialize`, `tools/list` and `tools/call` to its child, so it speaks them itself: one
JSON line per message each way (the standard library's `json`), answers matched by id, and
each result validated once, by the result type the caller asks for (or passed on as the
child's JSON object on the stdio fast path).

The child is started as the SDK starts one (its own session, so stopping it stops its
process group) with exactly the configured environment; it is stopped as the MCP lifecycle
says: stdin closed, then SIGTERM after 2 s, SIGKILL after 2 s more, its output drained
meanwhile so that it cannot block on a full pipe. It is spoken to in the handshake era
(`initialize`), which serves both of the client's eras: the gateway's SDK server shapes
every result for the client's version. Requests the child sends (none today) are answered
"method not found"; its notifications and unparsable lines are ignored. A JSON-RPC error
answer is raised as `MCPError` with the child's code, message and data, exactly as the SDK
session raises it; a closed child or a timeout raise the SDK's own `CONNECTION_CLOSED` /
`REQUEST_TIMEOUT` errors, so callers treat both kinds of upstream alike.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

_CLIENT_INFO = {"name": "engram-memory-gateway", "version": "0"}
# The MCP lifecycle's shutdown: close stdin, then SIGTERM, then SIGKILL (as the SDK times it).
_GRACE_S = 2.0
_MAX_LINE_BYTES = 64 * 1024 * 1024

Outcome = dict[str, Any] | types.ErrorData


def _wire(message: Mapping[str, Any]) -> bytes:
    return (
        json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
            "utf-8"
        )
        + b"\n"
    )


class StdioChannel:
    """Requests and their answers over one child process's pipes."""

    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._writing = anyio.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, MemoryObjectSendStream[Outcome]] = {}
        self.closed = False
        self._stopped = False
        # The handshake version the child chose (None before the handshake).
        self.protocol_version: str | None = None

    async def route(self) -> None:
        """Deliver each answer to its request until the child's output ends; then keep
        draining it, so that a child stopping is never blocked on a full pipe."""
        buffer = b""
        try:
            async for chunk in self._stdout:
                *lines, buffer = (buffer + chunk).split(b"\n")
                if len(buffer) > _MAX_LINE_BYTES:
                    buffer = b""  # not an answer anyone waits for: dropped
                for line in lines:
                    await self._route(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            self.closed = True
            for waiter in self._waiting.values():
                waiter.close()
            self._waiting.clear()

    async def _route(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        request_id = message.get("id")
        if "method" in message:
            if request_id is not None:
                error = {"code": types.METHOD_NOT_FOUND, "message": "Method not found"}
                await self._send({"jsonrpc": "2.0", "id": request_id, "error": error})
            return
        waiter = self._waiting.pop(request_id, None) if type(request_id) is int else None
        if waiter is None:
            return
        outcome = _outcome(message)
        # The requester may have given up (timeout, cancel) and closed its end.
        with contextlib.suppress(anyio.BrokenResourceError):
            waiter.send_nowait(outcome)
        waiter.close()

    async def _send(self, message: Mapping[str, Any]) -> None:
        async with self._writing:
            await self._stdin.send(_wire(message))

    async def initialize(self, timeout_s: float) -> None:
        """The handshake.

        Raises:
            MCPError: the child refused it, closed, timed out, or chose an unknown version.
        """
        result = await self.request(
            "initialize",
            {
                "protocolVersion": LATEST_HANDSHAKE_VERSION,
                "capabilities": {},
                "clientInfo": _CLIENT_INFO,
            },
            timeout_s,
        )
        version = result.get("protocolVersion")
        if not isinstance(version, str) or version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise MCPError(types.INVALID_REQUEST, "Unsupported protocol version")
        self.protocol_version = version
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def request(
        self, method: str, params: Mapping[str, Any], timeout_s: float
    ) -> dict[str, Any]:
        """Send one request and wait at most `timeout_s` for its result.

        Raises:
            MCPError: the child's JSON-RPC error (code, message and data unchanged);
                `CONNECTION_CLOSED` when the child is gone; `REQUEST_TIMEOUT` on timeout
                (the child is then told the request is cancelled).
        """
        if self.closed:
            raise MCPError(types.CONNECTION_CLOSED, "Connection closed")
        request_id = next(self._ids)
        send, receive = anyio.create_memory_object_stream[Outcome](1)
        self._waiting[request_id] = send
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        try:
            with anyio.move_on_after(timeout_s) as scope:
                try:
                    await self._send(message)
                    outcome = await receive.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    raise MCPError(types.CONNECTION_CLOSED, "Connection closed") from None
                except OSError:
                    raise MCPError(types.CONNECTION_CLOSED, "Connection closed") from None
            if scope.cancelled_caught:
                await self._cancel(request_id, "timed out")
                raise MCPError(types.REQUEST_TIMEOUT, "Request timed out")
        except anyio.get_cancelled_exc_class():
            # The client cancelled its call: the child is told, as the SDK session does.
            with anyio.CancelScope(shield=True):
                await self._cancel(request_id, "cancelled")
            raise
        finally:
            self._waiting.pop(request_id, None)
            receive.close()
        if isinstance(outcome, types.ErrorData):
            raise MCPError(outcome.code, outcome.message, outcome.data)
        return outcome

    async def _cancel(self, request_id: int, reason: str) -> None:
        params = {"requestId": request_id, "reason": reason}
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        with (
            anyio.move_on_after(1),
            contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError),
        ):
            await self._send(note)

    async def stop(self) -> None:
        """Stop the child (see the module docstring); every wait is bounded."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self._stdin.aclose()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self._process.pid, sig)
            with anyio.move_on_after(_GRACE_S):
                await self._process.wait()
            if self._process.returncode is not None:
                break
        with contextlib.suppress(OSError):
            await self._process.aclose()


def _outcome(message: Mapping[str, Any]) -> Outcome:
    """The result object of an answer, or its error (malformed answers are errors)."""
    if "error" in message:
        try:
            return types.ErrorData.model_validate(message["error"])
        except ValueError:
            return types.ErrorData(code=types.INTERNAL_ERROR, message="Internal error")
    result = message.get("result")
    if isinstance(result, dict):
        return result
    return types.ErrorData(code=types.INTERNAL_ERROR, message="Internal error")


@contextlib.asynccontextmanager
async def child_channel(
    command: Sequence[str], env: Mapping[str, str], timeout_s: float
) -> AsyncIterator[StdioChannel]:
    """The child `command` started with exactly `env`, handshake done, stopped on exit.

    Raises:
        OSError: the program cannot be started.
        MCPError: the handshake failed (see `StdioChannel.initialize`).
    """
    process = await anyio.open_process(
        list(command), env=dict(env), stderr=None, start_new_session=True
    )
    channel = StdioChannel(process)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(channel.route)
            try:
                await channel.initialize(timeout_s)
                yield channel
            finally:
                with anyio.CancelScope(shield=True):
                    await channel.stop()
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await channel.stop()
