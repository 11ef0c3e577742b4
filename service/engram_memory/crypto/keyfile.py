"""The bytes of one wrapped item key file.

Version 2 (92 bytes), written by this code:

    offset  size  field
    0       4     magic b"EKF\\x02"
    4       8     root key id (`keys.root_key_id`) the file is wrapped under
    12      4     scope-key epoch, unsigned big-endian
    16      16    scope tag (`keys.scope_tag`)
    32      12    AES-GCM nonce
    44      48    AES-256-GCM(scope wrapping key, 32-byte data key) with its 16-byte tag

The scope wrapping key is HKDF(root, "scope-wrap/v2" + tag + epoch), and the associated data
is the 32-byte header plus the SHA-256 file name digest of (scope, item): a file copied to
another item, or a header naming another root, epoch or scope, does not open. Because the
header says everything needed to re-derive the key except the root itself, rotation re-wraps a
file knowing only its name and the key ring.

Version 1 (headerless: 0x01, nonce, ciphertext) files written before epochs existed still
open under `scope-wrap/v1` of any root in the ring; rotation upgrades them to version 2.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engram_memory.contract.exceptions import KeyFileBroken, SealBroken, UnknownRootKey
from engram_memory.crypto.keys import KEY_BYTES, KEY_ID_BYTES, RootKey
from engram_memory.crypto.sealing import unwrap_key

MAGIC = b"EKF\x02"
HEADER_BYTES = 32
_NONCE_BYTES = 12
FILE_BYTES = HEADER_BYTES + _NONCE_BYTES + KEY_BYTES + 16
_AAD_LABEL = b"engram-memory/key-file/v2\0"
_LEGACY_FORMAT = b"\x01"


@dataclass(frozen=True)
class KeyFileHeader:
    root_id: bytes
    epoch: int
    tag: bytes

    def encode(self) -> bytes:
        return MAGIC + self.root_id + self.epoch.to_bytes(4, "big") + self.tag


def is_legacy(blob: bytes) -> bool:
    return blob[:1] == _LEGACY_FORMAT


def read_header(blob: bytes) -> KeyFileHeader:
    """Raises: KeyFileBroken: not a version 2 key file of the right length."""
    if len(blob) != FILE_BYTES or blob[:4] != MAGIC:
        raise KeyFileBroken("not a version 2 key file")
    return KeyFileHeader(
        root_id=blob[4 : 4 + KEY_ID_BYTES],
        epoch=int.from_bytes(blob[12:16], "big"),
        tag=blob[16:32],
    )


def wrap(root: RootKey, header: KeyFileHeader, name_digest: bytes, data_key: bytes) -> bytes:
    """Raises: UnknownRootKey: the header names a root this ring does not hold."""
    encoded = header.encode()
    key = root.epoch_wrapping_key(header.root_id, header.tag, header.epoch)
    nonce = secrets.token_bytes(_NONCE_BYTES)
    sealed = AESGCM(key).encrypt(nonce, data_key, _AAD_LABEL + encoded + name_digest)
    return encoded + nonce + sealed


def unwrap(root: RootKey, blob: bytes, name_digest: bytes) -> tuple[KeyFileHeader, bytes]:
    """(header, data key) of a version 2 file.

    Raises:
        KeyFileBroken: malformed, tampered, bound elsewhere, or under a root not held.
    """
    header = read_header(blob)
    try:
        key = root.epoch_wrapping_key(header.root_id, header.tag, header.epoch)
    except UnknownRootKey as exc:
        raise KeyFileBroken("wrapped under a root key not held") from exc
    nonce_end = HEADER_BYTES + _NONCE_BYTES
    nonce, body = blob[HEADER_BYTES:nonce_end], blob[nonce_end:]
    try:
        data_key = AESGCM(key).decrypt(nonce, body, _AAD_LABEL + blob[:HEADER_BYTES] + name_digest)
    except InvalidTag as exc:
        raise KeyFileBroken("key file does not open") from exc
    return header, data_key


def unwrap_legacy(root: RootKey, blob: bytes, scope_ref: str, item_id: str) -> bytes:
    """The data key of a headerless version 1 file, under any root of the ring.

    Raises:
        KeyFileBroken: it opens under none of them.
    """
    for scope_key in root.legacy_wrapping_keys(scope_ref):
        try:
            return unwrap_key(scope_key, blob, scope_ref, item_id)
        except SealBroken:
            continue
    raise KeyFileBroken("legacy key file does not open")
