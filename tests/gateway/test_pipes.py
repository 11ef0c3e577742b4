"""The stdio mode's line splitting: what reaches the SDK from the bytes a client writes."""

from __future__ import annotations

from engram_memory.contract.exceptions import LineTooLong
from engram_memory.gateway.pipes import MAX_LINE_BYTES, _LineReader


def _read(*chunks: bytes) -> list[bytes | Exception | None]:
    delivered: list[bytes | Exception | None] = []
    reader = _LineReader(delivered.append)
    for chunk in chunks:
        reader.data_received(chunk)
    reader.eof_received()
    return delivered


def test_lines_split_across_chunks_arrive_whole_and_in_order() -> None:
    assert _read(b'{"a":', b'1}\n{"b":2}\n', b"\n") == [b'{"a":1}', b'{"b":2}', None]


def test_an_overlong_line_is_one_error_and_the_next_line_arrives_intact() -> None:
    overlong = b"x" * (MAX_LINE_BYTES + 1)
    delivered = _read(overlong[:1000], overlong[1000:], b"tail\n", b'{"ok":1}\n')
    assert len(delivered) == 3
    assert isinstance(delivered[0], LineTooLong)
    assert delivered[1:] == [b'{"ok":1}', None]


def test_an_overlong_line_ending_in_the_chunk_that_made_it_overlong_is_one_error() -> None:
    delivered = _read(b"x" * MAX_LINE_BYTES, b'xx\n{"ok":1}\n')
    assert len(delivered) == 3
    assert isinstance(delivered[0], LineTooLong)
    assert delivered[1:] == [b'{"ok":1}', None]
