"""The stdio session's streams: what was read is in flight until answered, and every
JSON-RPC error leaves constant.

`serve_stdio` (mcp_server.py) hands the SDK's session these wrappers around the stdio
streams, so that a graceful stop (stopping.py) knows which requests still owe an answer, and
stops reading on the first SIGTERM/SIGINT.
"""

from __future__ import annotations

import signal
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

from engram_memory.contract.errors import wire_error_message
from engram_memory.transport.stdin_lines import StdinLines
from engram_memory.transport.stopping import GracefulStop

if TYPE_CHECKING:  # the SDK's stream protocols, for annotations only
    from mcp.shared._stream_protocols import ReadStream, WriteStream


def _in_flight_key(request_id: object) -> tuple[str, object]:
    return ("rpc", request_id)


class CountingReads:
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

    def __aiter__(self) -> CountingReads:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> CountingReads:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _constant_errors_only(item: SessionMessage) -> SessionMessage:
    """`item` with any JSON-RPC error made constant: no data, a constant message."""
    message = item.message
    if not isinstance(message, types.JSONRPCError):
        return item
    error = types.ErrorData(
        code=message.error.code,
        message=wire_error_message(message.error.code, message.error.message),
    )
    constant = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
    return SessionMessage(constant, metadata=item.metadata)


class CountingWrites:
    """The session's write side: an answer handed to the writer ends its request's flight;
    every error written is made constant on its way out (the SDK builds some outside any
    middleware, with data)."""

    def __init__(self, inner: WriteStream[SessionMessage], stop: GracefulStop) -> None:
        self._inner, self._stop = inner, stop
        self.answers = 0  # responses and errors written: did a client hear from us at all?

    async def send(self, item: SessionMessage, /) -> None:
        item = _constant_errors_only(item)
        await self._inner.send(item)
        if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
            self.answers += 1
            self._stop.leave(_in_flight_key(item.message.id))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> CountingWrites:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def stop_on_signal(stop: GracefulStop, lines: StdinLines) -> None:
    """First SIGTERM/SIGINT: read no more, let the answers owed go out (bounded), end."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as group:
            async for _signal in signals:
                first = not stop.stopping
                stop.request()
                if first:
                    lines.stop_reading()
                    group.start_soon(_end_when_drained, stop, lines)


async def _end_when_drained(stop: GracefulStop, lines: StdinLines) -> None:
    await anyio.to_thread.run_sync(stop.wait_drained)
    lines.end()
