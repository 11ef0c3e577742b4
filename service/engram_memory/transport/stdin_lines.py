"""Lines of stdin for the stdio transport, each judged by the JSON gate on its raw bytes.

Read on a daemon thread with `os.read` (see `StdinLines`), split on newlines, never decoded
with replacement: the gate (json_gate.py) refuses what is not strict JSON, and mcp_server.py
answers those refusals itself; only admitted lines reach the SDK.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import anyio
import anyio.from_thread
import anyio.lowlevel

from engram_memory.contract.refusals import RefusalReason
from engram_memory.transport.json_gate import (
    ARGUMENT_DEFECT,
    INVALID_REQUEST,
    ArgumentDefect,
    GateRefusal,
    inspect_message,
)


@dataclass(frozen=True)
class GatedLine:
    """A line the JSON gate admitted, decoded, with what the gate found in its arguments."""

    text: str
    argument_defect: ArgumentDefect | None


RefusalAnswer = Callable[[GateRefusal], Awaitable[None]]


class StdinLines:
    """Lines of stdin, read on a daemon thread so that a stop never waits on an idle client.

    (The SDK reads stdin in an anyio worker thread that cancellation cannot abandon and that
    would hold the process at exit.) Once a stop begins no further line is taken; `end`
    then closes the session as if the client had closed stdin.

    Every line passes the JSON gate on its raw bytes first (json_gate.py): a refused line
    never reaches the SDK (which would drop it unanswered) but is answered through
    `answer_refusals`; an admitted one is handed on with the gate's duplicate-argument-key
    flag set in the context the SDK snapshots with the message.
    """

    def __init__(self, fd: int, accepts: Callable[[object], bool], max_bytes: int) -> None:
        self._fd, self._accepts, self._max_bytes = fd, accepts, max_bytes
        self._send, self._receive = anyio.create_memory_object_stream[GatedLine | GateRefusal](0)
        self._reading = True
        self._waiting: anyio.CancelScope | None = None
        self._ended = anyio.Event()
        self._answer: RefusalAnswer | None = None
        self._answering = anyio.Event()

    def start(self) -> None:
        token = anyio.lowlevel.current_token()
        threading.Thread(target=self._pump, args=(token,), name="engram-stdin", daemon=True).start()

    def answer_refusals(self, answer: RefusalAnswer) -> None:
        """Send the gate's refusals through `answer` (lines wait for it to be set)."""
        self._answer = answer
        self._answering.set()

    def _pump(self, token: anyio.lowlevel.EventLoopToken) -> None:
        try:
            for line in raw_lines(self._fd, self._max_bytes):
                item = _gated(line, self._accepts)
                if item is not None:
                    anyio.from_thread.run(self._send.send, item, token=token)
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

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while self._reading:
            item: GatedLine | GateRefusal | None = None
            with anyio.CancelScope() as self._waiting:
                try:
                    item = await self._receive.receive()
                except anyio.EndOfStream:
                    raise StopAsyncIteration from None
            if isinstance(item, GateRefusal):
                await self._answering.wait()
                assert self._answer is not None
                await self._answer(item)
            elif item is not None:
                # The SDK sends the line on from this task right after: its snapshot of this
                # task's context carries the flag to the call's handler.
                ARGUMENT_DEFECT.set(item.argument_defect)
                return item.text
        await self._ended.wait()
        raise StopAsyncIteration


def _gated(
    line: bytes | OversizedLine, accepts: Callable[[object], bool]
) -> GatedLine | GateRefusal | None:
    """The gate's verdict on one line; None for a blank line (no message, no answer)."""
    if isinstance(line, OversizedLine):
        # Its id was never read: answered like any request the gate cannot trust.
        return GateRefusal(INVALID_REQUEST, None, RefusalReason.REQUEST_TOO_LARGE, "other")
    if not line.strip():
        return None
    verdict = inspect_message(line, accepts=accepts)
    if isinstance(verdict, GateRefusal):
        return verdict
    forwarded = line if verdict.forward is None else verdict.forward
    return GatedLine(forwarded.decode("utf-8") + "\n", verdict.argument_defect)


class OversizedLine:
    """Stands for a line longer than the request size cap: its bytes were dropped unread."""


OVERSIZED = OversizedLine()


def raw_lines(fd: int, max_bytes: int) -> Iterator[bytes | OversizedLine]:
    """Lines of `fd` as bytes, without their newline, read raw: a buffered reader's lock,
    held by a daemon thread blocked in a read, would abort the interpreter at exit. Not
    decoded here: the JSON gate refuses what is not UTF-8 instead of replacing it.

    A line longer than `max_bytes` is not kept: its bytes are dropped up to its newline and
    it comes out once as `OVERSIZED`, so a client that never ends a line costs at most
    `max_bytes` of memory (and the cap is the one HTTP applies to a body)."""
    pending = bytearray()
    dropping = False
    while chunk := os.read(fd, 65_536):
        start = 0
        while (newline := chunk.find(b"\n", start)) != -1:
            piece = chunk[start:newline]
            if dropping or len(pending) + len(piece) > max_bytes:
                yield OVERSIZED
            else:
                yield bytes(pending + piece)
            pending.clear()
            dropping = False
            start = newline + 1
        if dropping:
            continue
        pending += chunk[start:]
        if len(pending) > max_bytes:
            pending.clear()
            dropping = True
    if dropping:
        yield OVERSIZED
    elif pending:
        yield bytes(pending)
