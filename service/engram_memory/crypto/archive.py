"""The encrypted backup archive: a plaintext header, then AES-256-GCM chunks.

    header (64 bytes, plaintext, authenticated as part of every chunk's associated data)
      0   8   magic b"ENGRMBK\\x01"
      8   8   root key id the archive key derives from
      16  32  random salt: archive key = HKDF(root, salt, "engram-memory/backup/v1")
      48  4   chunk size (plaintext bytes per full chunk), big-endian
      52  4   reserved, zero
      56  8   SHA-256 of bytes 0..56 (truncated): tells a damaged header from a foreign root
    chunk (repeated)
      0   4   ciphertext length n, big-endian (16 < n <= chunk size + 16)
      4   n   AES-256-GCM(archive key, nonce = 4 zero bytes + chunk index (8, big-endian),
              plaintext, associated data = header + chunk index + final flag (1 byte))

The final chunk, and only it, has the final flag; nothing may follow it. Every reordered,
dropped, truncated, extended or altered byte therefore fails authentication or framing. The
key is unique per archive (fresh salt), so counter nonces never repeat under one key.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import BinaryIO, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engram_memory.contract.exceptions import ArchiveForeign, ArchiveInvalid, UnknownRootKey
from engram_memory.crypto.keys import KEY_ID_BYTES, RootKey

MAGIC = b"ENGRMBK\x01"
HEADER_BYTES = 64
DEFAULT_CHUNK = 1 << 20
MAX_CHUNK = 1 << 24
_TAG = 16


class Sink(Protocol):
    def write(self, data: bytes, /) -> object: ...


def _check(head: bytes) -> bytes:
    return hashlib.sha256(b"engram-memory/backup-header/v1\0" + head).digest()[:8]


def _nonce(index: int) -> bytes:
    return b"\0\0\0\0" + index.to_bytes(8, "big")


def _aad(header: bytes, index: int, final: bool) -> bytes:
    return header + index.to_bytes(8, "big") + (b"\x01" if final else b"\x00")


class ArchiveWriter:
    """Encrypts a plaintext stream into `sink`; nothing is buffered beyond one chunk."""

    def __init__(self, sink: Sink, root: RootKey, chunk_size: int = DEFAULT_CHUNK) -> None:
        if not 0 < chunk_size <= MAX_CHUNK:
            raise ValueError("chunk size out of range")
        salt = secrets.token_bytes(32)
        head = MAGIC + root.key_id + salt + chunk_size.to_bytes(4, "big") + bytes(4)
        self.header = head + _check(head)
        self._aead = AESGCM(root.archive_key(root.key_id, salt))
        self._sink = sink
        self._chunk = chunk_size
        self._buffer = bytearray()
        self._index = 0
        self.written = 0
        self._emit(self.header)

    def _emit(self, data: bytes) -> None:
        self._sink.write(data)
        self.written += len(data)

    def _seal(self, plaintext: bytes, final: bool) -> None:
        sealed = self._aead.encrypt(
            _nonce(self._index), plaintext, _aad(self.header, self._index, final)
        )
        self._emit(len(sealed).to_bytes(4, "big") + sealed)
        self._index += 1

    def write(self, data: bytes) -> None:
        self._buffer += data
        # Keep at least one byte back: the last chunk must be sealed as final by `finish`.
        while len(self._buffer) > self._chunk:
            self._seal(bytes(self._buffer[: self._chunk]), final=False)
            del self._buffer[: self._chunk]

    def finish(self) -> None:
        self._seal(bytes(self._buffer), final=True)
        self._buffer.clear()


class ArchiveReader:
    """Decrypts and authenticates an archive chunk by chunk; `read` never returns a byte
    that has not been authenticated."""

    def __init__(self, source: BinaryIO, root: RootKey) -> None:
        """Raises: ArchiveInvalid: damaged header. ArchiveForeign: root key not held."""
        self._source = source
        header = source.read(HEADER_BYTES)
        if len(header) != HEADER_BYTES or header[:8] != MAGIC:
            raise ArchiveInvalid("not an engram backup archive")
        if _check(header[:56]) != header[56:] or header[52:56] != bytes(4):
            raise ArchiveInvalid("archive header damaged")
        self.root_id = header[8 : 8 + KEY_ID_BYTES]
        self._chunk = int.from_bytes(header[48:52], "big")
        if not 0 < self._chunk <= MAX_CHUNK:
            raise ArchiveInvalid("archive header damaged")
        try:
            key = root.archive_key(self.root_id, header[16:48])
        except UnknownRootKey as exc:
            raise ArchiveForeign("archive made under another root key") from exc
        self._aead = AESGCM(key)
        self._header = header
        self._index = 0
        self._buffer = bytearray()
        self._final = False

    def _next_chunk(self) -> None:
        if self._final:
            raise ArchiveInvalid("read past the end of the archive")
        length_bytes = self._source.read(4)
        if len(length_bytes) != 4:
            raise ArchiveInvalid("archive truncated")
        length = int.from_bytes(length_bytes, "big")
        if not _TAG <= length <= self._chunk + _TAG:
            raise ArchiveInvalid("chunk length out of range")
        sealed = self._source.read(length)
        if len(sealed) != length:
            raise ArchiveInvalid("archive truncated")
        for final in (False, True):
            try:
                plaintext = self._aead.decrypt(
                    _nonce(self._index), sealed, _aad(self._header, self._index, final)
                )
            except InvalidTag:
                continue
            if not final and len(plaintext) != self._chunk:
                raise ArchiveInvalid("short chunk before the end")
            self._final = final
            self._index += 1
            self._buffer += plaintext
            return
        raise ArchiveInvalid("chunk does not authenticate")

    def read(self, size: int) -> bytes:
        """Exactly `size` authenticated bytes.

        Raises:
            ArchiveInvalid: the archive ends (or fails authentication) first.
        """
        while len(self._buffer) < size:
            self._next_chunk()
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out

    def expect_end(self) -> None:
        """Raises: ArchiveInvalid: plaintext left over, no final chunk, or bytes after it."""
        while not self._final:
            self._next_chunk()
        if self._buffer or self._source.read(1):
            raise ArchiveInvalid("data after the end of the archive")
