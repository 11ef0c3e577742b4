"""JSON-RPC requests to a stdio upstream over the SDK's transport, without its client session.

The SDK's `Client`/`ClientSession` costs about 1 ms of CPU per call on the 2-core bench
machine (a request model, its dump, a JSON-RPC request model, a tracing span, memory streams
and a task per request, then the answer validated twice: once against the negotiated
version's result model and once against the result type), and issue 11 gives the gateway
1 ms for all it adds. The gateway only ever sends `initialize`, `tools/list` and
`tools/call`, so for a child upstream it speaks them itself over the SDK's own
`stdio_client` transport (which keeps starting, piping and stopping the child, process tree
included): one message model per line each way, answers matched by id, and each result
validated once, by the result type the caller asks for.

The child is spoken to in the handshake era (`initialize`), which serves both of the
client's eras: the gateway's SDK server shapes every result for the client's version.
Requests the child sends (none today) are answered "method not found"; its notifications are
ignored. A JSON-RPC error answer is raised as `MCPError` with the child's code, message and
data, exactly as the SDK session raises it; a closed child or a timeout raises the SDK's own
`CONNECTION_CLOSED` / `REQUEST_TIMEOUT` errors, so callers treat both paths alike.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

_CLIENT_INFO = {"name": "engram-memory-gateway", "version": "0"}

Outcome = dict[str, Any] | types.ErrorData


class StdioChannel:
    """Requests and their answers over one child's (read, write) message streams."""

    def __init__(self, read_stream: Any, write_stream: Any) -> None:
        self._read = read_stream
        self._write = write_stream
        self._ids = itertools.count(1)
        self._waiting: dict[int, MemoryObjectSendStream[Outcome]] = {}
        self.closed = False
        # The handshake version the child chose (None before the handshake).
        self.protocol_version: str | None = None

    async def route(self) -> None:
        """Deliver each answer to its request until the child's output ends."""
        try:
            async for item in self._read:
                if isinstance(item, SessionMessage):
                    await self._route(item.message)
        finally:
            self.closed = True
            for waiter in self._waiting.values():
                waiter.close()
            self._waiting.clear()

    async def _route(self, message: Any) -> None:
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            waiter = self._waiting.pop(message.id, None) if isinstance(message.id, int) else None
            if waiter is not None:
                outcome: Outcome = (
                    message.result if isinstance(message, types.JSONRPCResponse) else message.error
                )
                # The requester may have given up (timeout, cancel) and closed its end.
                with contextlib.suppress(anyio.BrokenResourceError):
                    waiter.send_nowait(outcome)
                waiter.close()
        elif isinstance(message, types.JSONRPCRequest):
            error = types.ErrorData(code=types.METHOD_NOT_FOUND, message="Method not found")
            refusal = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
            await self._write.send(SessionMessage(refusal))

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
        note = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")
        await self._write.send(SessionMessage(note))

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
        message = types.JSONRPCRequest(
            jsonrpc="2.0", id=request_id, method=method, params=dict(params)
        )
        try:
            with anyio.move_on_after(timeout_s) as scope:
                try:
                    await self._write.send(SessionMessage(message))
                    outcome = await receive.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
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
        note = types.JSONRPCNotification(
            jsonrpc="2.0", method="notifications/cancelled", params=params
        )
        try:
            with anyio.move_on_after(1):
                await self._write.send(SessionMessage(note))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
