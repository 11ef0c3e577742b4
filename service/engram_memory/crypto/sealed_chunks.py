"""AES-256-GCM over a payload of any size, in chunks (AES-GCM takes at most 2 GiB at once,
and a payload of hundreds of MiB should not be copied whole once more).

Each chunk is sealed under one random 8-byte prefix and its 4-byte number as the nonce, with
the caller's binding, the chunk's number and a last-chunk flag as associated data, so chunks
cannot be reordered, dropped, repeated or cut off at a chunk boundary unnoticed (the STREAM
construction). Layout: prefix (8) | chunk count (4) | each chunk's sealed length (4) and
sealed bytes.
"""

from __future__ import annotations

import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

CHUNK_BYTES = 64 * 1024 * 1024
_PREFIX = 8
_TAG = 16


def seal(key: bytes, binding: bytes, payload: bytes | memoryview) -> bytes:
    """`payload` sealed under `key`, bound to `binding`."""
    view = memoryview(payload)
    prefix = os.urandom(_PREFIX)
    count = max(1, -(-len(view) // CHUNK_BYTES))
    aead = AESGCM(key)
    parts = [prefix, struct.pack(">I", count)]
    for number in range(count):
        chunk = view[number * CHUNK_BYTES : (number + 1) * CHUNK_BYTES]
        sealed = aead.encrypt(
            prefix + struct.pack(">I", number), chunk, _aad(binding, number, count)
        )
        parts += [struct.pack(">I", len(sealed)), sealed]
    return b"".join(parts)


def open_sealed(key: bytes, binding: bytes, blob: bytes) -> bytes | None:
    """The payload, or None when `blob` was not sealed by `seal` under `key` and `binding`
    (changed, cut, another key or binding)."""
    view = memoryview(blob)
    if len(view) < _PREFIX + 4:
        return None
    prefix = bytes(view[:_PREFIX])
    (count,) = struct.unpack(">I", view[_PREFIX : _PREFIX + 4])
    aead = AESGCM(key)
    at = _PREFIX + 4
    parts: list[bytes] = []
    for number in range(count):
        if len(view) < at + 4:
            return None
        (length,) = struct.unpack(">I", view[at : at + 4])
        at += 4
        if length < _TAG or len(view) < at + length:
            return None
        try:
            parts.append(
                aead.decrypt(
                    prefix + struct.pack(">I", number),
                    view[at : at + length],
                    _aad(binding, number, count),
                )
            )
        except InvalidTag:
            return None
        at += length
    return b"".join(parts) if at == len(view) else None


def _aad(binding: bytes, number: int, count: int) -> bytes:
    return binding + struct.pack(">IB", number, 1 if number == count - 1 else 0)
