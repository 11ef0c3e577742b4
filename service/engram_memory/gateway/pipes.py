"""stdin/stdout as event-loop pipes for the stdio mode: no worker-thread hop per line.

The SDK's `stdio_server` reads and writes through `anyio.wrap_file`, so every line read,
every write and every flush hops to a worker thread and back (three hops per call, about
0.7 ms of CPU per call on the 2-core bench machine). Issue 11 gives the gateway 1 ms for all
it adds, so here the event loop reads and writes the pipes itself (asyncio's pipe
transports); each line is judged by the JSON gate `engram-memory serve` runs (door.py:
refusals answered here, constant, and audited), and what it admits is handed on as the
gate's own parse validated by the SDK's message model (one parse per line) through the same
context-carrying memory streams as `stdio_server` does, so the server sees no difference.

Only when stdin and stdout are pipes or sockets of their own, as a desktop client spawns
the gateway: they are switched to non-blocking mode, which a terminal, a file, or a stdout
shared with stderr must not be; anything else is served by the SDK's `stdio_server`
reading through serve's gated `StdinLines` (stdin_lines.py): the same door either way.
Like `stdio_server`, fd 0 and 1 point elsewhere while serving (0 at /dev/null, 1 at stderr)
so that a stray print cannot corrupt the wire, and are restored at the end.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from engram_memory.contract.exceptions import LineTooLong
from engram_memory.gateway.door import OVERSIZED, SdkModel, sdk_accepts
from engram_memory.transport.json_gate import ARGUMENT_DEFECT, GateRefusal, inspect_message
from engram_memory.transport.stdin_lines import StdinLines

# The same bound `engram-memory serve` puts on a stdio request line (http_settings.py).
MAX_LINE_BYTES = 4 * 1024 * 1024
# Lines parsed ahead of the server before the pipe stops being read.
_AHEAD = 32

Streams = tuple[Any, Any]
Answer = types.JSONRPCResponse | types.JSONRPCError
# Offered every request first with the client's negotiated handshake version (None before
# the handshake or in the 2026 era): the answer it will give, or None for the SDK server.
FastPath = Callable[[types.JSONRPCRequest, str | None], Awaitable[Answer] | None]
# Records a refusal of the gate once it was answered on the wire (door.DoorRefusals).
OnRefusal = Callable[[GateRefusal], Awaitable[None]]


def _stream_like(mode: int) -> bool:
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def owns_its_pipes() -> bool:
    """True when stdin and stdout are pipes/sockets, distinct from each other and stderr."""
    try:
        stdin, stdout, stderr = (os.fstat(fd) for fd in (0, 1, 2))
    except OSError:
        return False

    def same(a: os.stat_result, b: os.stat_result) -> bool:
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)

    return (
        _stream_like(stdin.st_mode)
        and _stream_like(stdout.st_mode)
        and not same(stdin, stdout)
        and not same(stdout, stderr)
    )


class _LineReader(asyncio.Protocol):
    """Splits the pipe's bytes into lines for `deliver` (None at the end); pauses reading
    while too many lines wait."""

    def __init__(self, deliver: Callable[[bytes | Exception | None], None]) -> None:
        self._deliver = deliver
        self._buffer = bytearray()
        self._skipping = False
        self.transport: asyncio.ReadTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.ReadTransport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            if self._skipping:
                self._skipping = False
            elif len(line) > MAX_LINE_BYTES:  # it ended in the chunk that made it too long
                self._deliver(LineTooLong("request line too long"))
            elif line.strip():
                self._deliver(line)
        if len(self._buffer) > MAX_LINE_BYTES:
            self._buffer.clear()
            if not self._skipping:
                self._skipping = True
                self._deliver(LineTooLong("request line too long"))

    def eof_received(self) -> bool:
        self._deliver(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._deliver(None)


class _Writer(asyncio.Protocol):
    """Write-side flow control: `drained` is set while the pipe accepts more."""

    def __init__(self) -> None:
        self.drained = asyncio.Event()
        self.drained.set()

    def pause_writing(self) -> None:
        self.drained.clear()

    def resume_writing(self) -> None:
        self.drained.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.drained.set()


def _private_duplicate(fd: int) -> int:
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def _negotiated_version(message: Any) -> str | None:
    """The version in a handshake `initialize` result the server sends, else None."""
    if not isinstance(message, types.JSONRPCResponse):
        return None
    result = message.result
    if {"protocolVersion", "capabilities", "serverInfo"} <= result.keys():
        version = result["protocolVersion"]
        return version if isinstance(version, str) else None
    return None


def _cancelled_id(message: Any) -> object:
    if isinstance(message, types.JSONRPCNotification) and message.method == (
        "notifications/cancelled"
    ):
        return (message.params or {}).get("requestId")
    return None


@asynccontextmanager
async def _loop_stdio(fast: FastPath | None, on_refusal: OnRefusal) -> AsyncIterator[Streams]:
    loop = asyncio.get_running_loop()
    wire_in, wire_out = _private_duplicate(0), _private_duplicate(1)
    saved_in, saved_out = _private_duplicate(0), _private_duplicate(1)
    lines: asyncio.Queue[bytes | Exception | None] = asyncio.Queue()

    def deliver(line: bytes | Exception | None) -> None:
        lines.put_nowait(line)
        if lines.qsize() > _AHEAD and reader.transport is not None:
            reader.transport.pause_reading()

    reader = _LineReader(deliver)
    writer = _Writer()
    read_transport, _ = await loop.connect_read_pipe(
        lambda: reader, os.fdopen(wire_in, "rb", buffering=0)
    )
    write_transport, _ = await loop.connect_write_pipe(
        lambda: writer, os.fdopen(wire_out, "wb", buffering=0)
    )
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    to_server, from_client = create_context_streams[SessionMessage | Exception](0)
    from_server, to_client = create_context_streams[SessionMessage](0)
    client_version: str | None = None
    in_flight: dict[object, anyio.CancelScope] = {}
    all_answered = anyio.Event()
    all_answered.set()

    async def emit(message: Any) -> None:
        nonlocal client_version
        client_version = _negotiated_version(message) or client_version
        wire = message.model_dump_json(by_alias=True, exclude_unset=True)
        await writer.drained.wait()
        if not write_transport.is_closing():
            write_transport.write(wire.encode("utf-8") + b"\n")

    async def answer(request_id: object, pending: Awaitable[Answer]) -> None:
        nonlocal all_answered
        with anyio.CancelScope() as scope:
            in_flight[request_id] = scope
            if all_answered.is_set():
                all_answered = anyio.Event()
            try:
                reply = await pending
            finally:
                del in_flight[request_id]
                if not in_flight:
                    all_answered.set()
            await emit(reply)

    def offered(message: Any, group: anyio.abc.TaskGroup) -> bool:
        """True when the fast path took `message` (a cancel also reaches the server, which
        ignores an id it never saw)."""
        if fast is None:
            return False
        cancelled = _cancelled_id(message)
        if cancelled is not None and cancelled in in_flight:
            in_flight[cancelled].cancel()
        if not isinstance(message, types.JSONRPCRequest) or message.id in in_flight:
            return False
        pending = fast(message, client_version)
        if pending is None:
            return False
        group.start_soon(answer, message.id, pending)
        return True

    async def read_lines(group: anyio.abc.TaskGroup) -> None:
        model = SdkModel()
        async with to_server:
            while (line := await lines.get()) is not None:
                if lines.qsize() <= _AHEAD // 2 and not read_transport.is_closing():
                    read_transport.resume_reading()
                if isinstance(line, bytes):
                    verdict = inspect_message(line, accepts=model)
                else:
                    verdict = OVERSIZED
                if isinstance(verdict, GateRefusal):
                    await emit(types.JSONRPCError.model_validate(verdict.answer()))
                    await on_refusal(verdict)
                    continue
                message = model.model  # the gate's parse, as the SDK's model took it
                assert message is not None
                # Set in this task, which hands the message on: the server's handler and
                # the fast path's task run in a snapshot of its context (json_gate.py).
                ARGUMENT_DEFECT.set(verdict.argument_defect)
                if not offered(message, group):
                    await to_server.send(SessionMessage(message))
            # The client closed stdin: what it asked for is still answered.
            await all_answered.wait()

    async def write_lines() -> None:
        async with to_client:
            async for item in to_client:
                await emit(item.message)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(read_lines, group)
            group.start_soon(write_lines)
            yield from_client, from_server
            group.cancel_scope.cancel()
    finally:
        read_transport.close()
        write_transport.close()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)


def gateway_stdio(
    on_refusal: OnRefusal, fast: FastPath | None = None
) -> AbstractAsyncContextManager[Streams]:
    """The (read, write) streams of the MCP session on stdin/stdout (see the module): every
    line judged by the JSON gate, each refusal answered and then handed to `on_refusal`;
    with pipes of its own, `fast` is offered every request first (fast.py)."""
    if owns_its_pipes():
        return _loop_stdio(fast, on_refusal)
    return _gated_sdk_stdio(on_refusal)


@asynccontextmanager
async def _gated_sdk_stdio(on_refusal: OnRefusal) -> AsyncIterator[Streams]:
    lines = StdinLines(0, accepts=sdk_accepts, max_bytes=MAX_LINE_BYTES)
    lines.start()
    # The SDK only iterates what it is given as stdin, which is all `StdinLines` offers.
    async with stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (read, write):

        async def answer(refusal: GateRefusal) -> None:
            error = types.JSONRPCError.model_validate(refusal.answer())
            await write.send(SessionMessage(error))
            await on_refusal(refusal)

        lines.answer_refusals(answer)
        try:
            yield read, write
        finally:
            lines.end()
