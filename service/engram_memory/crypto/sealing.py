"""AES-256-GCM envelope encryption of candidate and record bodies.

Associated data binds every ciphertext to its scope and item id, so a sealed body copied to
another row or scope fails to open instead of silently decrypting.
"""

from __future__ import annotations

import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engram_memory.contract.exceptions import SealBroken
from engram_memory.crypto.keys import KEY_BYTES

_NONCE_BYTES = 12
_FORMAT = b"\x01"  # leading version byte of sealed bodies and wrapped keys


def _aad(purpose: bytes, scope_ref: str, item_id: str) -> bytes:
    return b"engram-memory/" + purpose + b"/v1\0" + scope_ref.encode() + b"\0" + item_id.encode()


def new_data_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def _encrypt(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    nonce = secrets.token_bytes(_NONCE_BYTES)
    return _FORMAT + nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def _decrypt(key: bytes, blob: bytes, aad: bytes) -> bytes:
    if len(blob) < 1 + _NONCE_BYTES + 16 or blob[:1] != _FORMAT:
        raise SealBroken("unknown format")
    nonce, body = blob[1 : 1 + _NONCE_BYTES], blob[1 + _NONCE_BYTES :]
    try:
        return AESGCM(key).decrypt(nonce, body, aad)
    except InvalidTag as exc:
        raise SealBroken("authentication failed") from exc


def wrap_key(scope_key: bytes, data_key: bytes, scope_ref: str, item_id: str) -> bytes:
    return _encrypt(scope_key, data_key, _aad(b"wrap", scope_ref, item_id))


def unwrap_key(scope_key: bytes, wrapped: bytes, scope_ref: str, item_id: str) -> bytes:
    """Raises: SealBroken: the wrapped key does not open under this scope and item."""
    return _decrypt(scope_key, wrapped, _aad(b"wrap", scope_ref, item_id))


def seal(data_key: bytes, plaintext: bytes, scope_ref: str, item_id: str) -> bytes:
    return _encrypt(data_key, plaintext, _aad(b"seal", scope_ref, item_id))


def open_sealed(data_key: bytes, blob: bytes, scope_ref: str, item_id: str) -> bytes:
    """Raises: SealBroken: the body does not open under this key, scope and item."""
    return _decrypt(data_key, blob, _aad(b"seal", scope_ref, item_id))
