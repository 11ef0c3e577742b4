"""The backup archive: authenticated chunks; any damage, truncation or foreign key is caught."""

from __future__ import annotations

import io
import os

import pytest

from engram_memory.contract.exceptions import ArchiveForeign, ArchiveInvalid
from engram_memory.crypto.archive import HEADER_BYTES, ArchiveReader, ArchiveWriter
from engram_memory.crypto.keys import RootKey

ROOT = RootKey(os.urandom(32))
PLAINTEXT = bytes(range(256)) * 9 + b"canary-plaintext"  # 2320 bytes: several 512-byte chunks


def _archive(plaintext: bytes = PLAINTEXT, chunk: int = 512) -> bytes:
    sink = io.BytesIO()
    writer = ArchiveWriter(sink, ROOT, chunk_size=chunk)
    for start in range(0, len(plaintext), 100):
        writer.write(plaintext[start : start + 100])
    writer.finish()
    return sink.getvalue()


def _read_all(blob: bytes, root: RootKey = ROOT, size: int = len(PLAINTEXT)) -> bytes:
    reader = ArchiveReader(io.BytesIO(blob), root)
    data = reader.read(size)
    reader.expect_end()
    return data


def test_archive_round_trips_and_never_holds_the_plaintext() -> None:
    blob = _archive()
    assert _read_all(blob) == PLAINTEXT
    assert b"canary-plaintext" not in blob


def test_empty_and_exactly_chunk_sized_streams_round_trip() -> None:
    assert _read_all(_archive(b""), size=0) == b""
    assert _read_all(_archive(b"x" * 1024), size=1024) == b"x" * 1024


def test_every_flipped_byte_is_refused_as_invalid() -> None:
    blob = _archive()
    for offset in range(len(blob)):
        damaged = bytearray(blob)
        damaged[offset] ^= 0x01
        with pytest.raises(ArchiveInvalid):
            _read_all(bytes(damaged))


def test_every_truncation_and_any_extension_is_refused_as_invalid() -> None:
    blob = _archive()
    for length in range(len(blob)):
        with pytest.raises(ArchiveInvalid):
            _read_all(blob[:length])
    with pytest.raises(ArchiveInvalid):
        _read_all(blob + b"\0")


def test_reordered_chunks_are_refused() -> None:
    blob = _archive(b"a" * 512 + b"b" * 512 + b"c", chunk=512)
    framed = 4 + 512 + 16
    first = blob[HEADER_BYTES : HEADER_BYTES + framed]
    second = blob[HEADER_BYTES + framed : HEADER_BYTES + 2 * framed]
    swapped = blob[:HEADER_BYTES] + second + first + blob[HEADER_BYTES + 2 * framed :]
    with pytest.raises(ArchiveInvalid):
        _read_all(swapped, size=1025)


def test_an_archive_under_another_root_is_foreign_not_invalid() -> None:
    with pytest.raises(ArchiveForeign):
        _read_all(_archive(), root=RootKey(os.urandom(32)))


def test_a_ring_holding_the_archives_root_as_previous_reads_it() -> None:
    assert _read_all(_archive(), root=ROOT.rotated()) == PLAINTEXT
