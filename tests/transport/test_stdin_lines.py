"""The gated stdin reader (stdin_lines.py), over a pipe instead of the process's stdin."""

from __future__ import annotations

import os
import threading

import anyio

from engram_memory.transport.json_gate import (
    ARGUMENT_DEFECT,
    PARSE_ERROR,
    ArgumentDefect,
    GateRefusal,
)
from engram_memory.transport.stdin_lines import OVERSIZED, StdinLines, raw_lines

CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}'
DUPLICATED = CALL.replace(b'"arguments":{}', b'"arguments":{"a":1,"a":2}')


def _pipe_with(data: bytes) -> int:
    """A pipe holding `data` then end of file; written from a thread, since a pipe holds
    only 64 KiB until its reader takes some."""
    read_end, write_end = os.pipe()

    def write_all() -> None:
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)

    threading.Thread(target=write_all, daemon=True).start()
    return read_end


def test_raw_lines_are_bytes_split_on_newlines_and_never_decoded() -> None:
    fd = _pipe_with(b"one\n\xff\xfe\n\nlast-without-newline")
    try:
        assert list(raw_lines(fd, 1024)) == [b"one", b"\xff\xfe", b"", b"last-without-newline"]
    finally:
        os.close(fd)


def test_a_line_over_the_cap_comes_out_once_as_oversized_and_the_next_line_is_intact() -> None:
    # Longer than one 64 KiB read, so the cap is met while the line is still being read.
    fd = _pipe_with(b"x" * 200_000 + b"\nshort\n" + b"y" * 11 + b"\n" + b"z" * 300_000)
    try:
        assert list(raw_lines(fd, 10)) == [OVERSIZED, b"short", OVERSIZED, OVERSIZED]
    finally:
        os.close(fd)
    fd = _pipe_with(b"x" * 200_000 + b"\nshort\n" + b"y" * 10 + b"\n")
    try:
        assert list(raw_lines(fd, 10)) == [OVERSIZED, b"short", b"y" * 10]
    finally:
        os.close(fd)


async def test_admitted_lines_reach_the_reader_with_their_flag_and_refusals_are_answered() -> None:
    fd = _pipe_with(CALL + b"\n\xff\n   \n" + DUPLICATED + b"\n")
    refused: list[GateRefusal] = []

    async def answer(refusal: GateRefusal) -> None:
        refused.append(refusal)

    lines = StdinLines(fd, accepts=lambda _message: True, max_bytes=1024)
    lines.answer_refusals(answer)
    seen: list[tuple[str, ArgumentDefect | None]] = []
    try:
        with anyio.fail_after(10):
            lines.start()
            async for text in lines:
                seen.append((text, ARGUMENT_DEFECT.get()))
    finally:
        os.close(fd)
    assert seen == [
        (CALL.decode() + "\n", None),
        (DUPLICATED.decode() + "\n", ArgumentDefect.DUPLICATE_KEYS),
    ]
    assert [refusal.code for refusal in refused] == [PARSE_ERROR]  # the blank line is no message
