"""Sealing of the semantic vectors kept in the store (store/record_vectors.py).

A vector is derived from a record's content, so it is stored only sealed: AES-256-GCM under
the scope's vector key (`RootKey.scope_vector_key`), a fresh 96-bit nonce per vector, the
scope, record id and model bound as associated data (a row moved to another record or model
fails to open). Inside is the vector as little-endian float16: half the bytes of float32, and
the semantic projection holds every vector at float16 precision anyway
(core/semantic_index.py), so a vector loaded from the store equals the one just embedded.
"""

from __future__ import annotations

import os

import numpy as np
import numpy.typing as npt
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_NONCE_BYTES = 12
_STORED = np.dtype("<f2")


def _bound(scope_ref: str, record_id: str, model_ref: str) -> bytes:
    return "\0".join(("engram-memory/semantic-vector/v1", scope_ref, record_id, model_ref)).encode(
        "utf-8"
    )


class VectorSealer:
    """Seals and opens one scope's vectors under its key."""

    def __init__(self, key: bytes, scope_ref: str, model_ref: str) -> None:
        self._aead = AESGCM(key)
        self._scope_ref, self._model_ref = scope_ref, model_ref

    def seal(self, record_id: str, vector: npt.NDArray[np.float32]) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        plain = np.ascontiguousarray(vector, dtype=_STORED).tobytes()
        bound = _bound(self._scope_ref, record_id, self._model_ref)
        return nonce + self._aead.encrypt(nonce, plain, bound)

    def open(
        self, record_id: str, sealed: bytes, dimensions: int
    ) -> npt.NDArray[np.float32] | None:
        """The vector, or None when the row does not open (damaged, moved, another key or
        model, another size): the record is then embedded again from its body."""
        bound = _bound(self._scope_ref, record_id, self._model_ref)
        try:
            plain = self._aead.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], bound)
        except (InvalidTag, ValueError):
            return None
        if len(plain) != dimensions * _STORED.itemsize:
            return None
        return np.frombuffer(plain, dtype=_STORED).astype(np.float32)


def at_stored_precision(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """`vectors` rounded to the precision they are kept at (float16), as float32."""
    return np.asarray(vectors, dtype=_STORED).astype(np.float32)
