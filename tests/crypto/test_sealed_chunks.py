"""Chunked AES-GCM (crypto/sealed_chunks.py): a payload opens only whole, in order, under
its key and binding."""

from __future__ import annotations

import os
import struct

import pytest

from engram_memory.crypto import sealed_chunks
from engram_memory.crypto.sealed_chunks import open_sealed, seal

KEY = bytes(range(32))
BINDING = b"store fingerprint"


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sealed_chunks, "CHUNK_BYTES", 16)


def _chunks(blob: bytes) -> tuple[bytes, list[bytes]]:
    """(prefix and count, each chunk with its length) of a sealed blob."""
    (count,) = struct.unpack(">I", blob[8:12])
    at, chunks = 12, []
    for _ in range(count):
        (length,) = struct.unpack(">I", blob[at : at + 4])
        chunks.append(blob[at : at + 4 + length])
        at += 4 + length
    return blob[:12], chunks


@pytest.mark.parametrize("size", [0, 1, 16, 17, 100])
def test_a_sealed_payload_opens_whole(small_chunks: None, size: int) -> None:
    payload = os.urandom(size)
    assert open_sealed(KEY, BINDING, seal(KEY, BINDING, payload)) == payload


def test_another_key_or_binding_does_not_open_it(small_chunks: None) -> None:
    blob = seal(KEY, BINDING, b"x" * 40)
    assert open_sealed(bytes(32), BINDING, blob) is None
    assert open_sealed(KEY, b"another store", blob) is None


def test_chunks_dropped_reordered_or_repeated_do_not_open(small_chunks: None) -> None:
    head, chunks = _chunks(seal(KEY, BINDING, os.urandom(48)))
    assert len(chunks) == 3

    def count(n: int) -> bytes:
        return head[:8] + struct.pack(">I", n)

    assert open_sealed(KEY, BINDING, count(2) + b"".join(chunks[:2])) is None  # cut at a chunk
    assert open_sealed(KEY, BINDING, head + chunks[1] + chunks[0] + chunks[2]) is None
    assert open_sealed(KEY, BINDING, count(4) + b"".join(chunks) + chunks[2]) is None
    assert open_sealed(KEY, BINDING, head + b"".join(chunks) + b"\0") is None


@pytest.mark.parametrize("cut", [0, 5, 12, 30])
def test_a_truncated_blob_does_not_open(small_chunks: None, cut: int) -> None:
    blob = seal(KEY, BINDING, os.urandom(40))
    assert open_sealed(KEY, BINDING, blob[:cut]) is None
