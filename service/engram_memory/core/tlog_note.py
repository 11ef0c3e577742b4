"""Checkpoints of the audit tree in the C2SP `tlog-checkpoint` format, as C2SP signed notes.

A checkpoint body is three lines: the log's origin, the tree size in decimal, and the
base64 root hash (RFC 9162 tree: core/merkle.py). The note appends a blank line and one
signature line, `— <origin> <base64(key hash || Ed25519 signature)>`, where the key hash
is the first 4 bytes of SHA-256(<origin> || 0x0A || 0x01 || raw public key) and the
signature covers the body exactly. Signed with the checkpoint key (crypto/
checkpoint_key.py); anyone holding its public key can check a note with nothing else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from cryptography.hazmat.primitives import serialization

from engram_memory.contract.exceptions import CheckpointInvalid
from engram_memory.crypto.checkpoint_key import CheckpointPublicKey, CheckpointSigningKey

ORIGIN_PREFIX = "engram-memory/audit/"
_DASH = "\u2014"  # the em dash every C2SP signature line starts with
_ED25519 = b"\x01"


def origin_for(public: CheckpointPublicKey) -> str:
    """The log's origin line: one log per checkpoint key."""
    return ORIGIN_PREFIX + public.key_id[:16]


def _key_hash(origin: str, public: CheckpointPublicKey) -> bytes:
    raw = public.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(origin.encode("utf-8") + b"\n" + _ED25519 + raw).digest()[:4]


def sign_checkpoint(size: int, root: bytes, key: CheckpointSigningKey) -> str:
    """The signed note of a tree of `size` leaves with root `root`."""
    origin = origin_for(key.public)
    body = f"{origin}\n{size}\n{base64.b64encode(root).decode('ascii')}\n"
    signature = key.sign(body.encode("utf-8"))
    blob = base64.b64encode(_key_hash(origin, key.public) + signature).decode("ascii")
    return f"{body}\n{_DASH} {origin} {blob}\n"


def open_checkpoint(note: str, public: CheckpointPublicKey) -> tuple[int, bytes]:
    """(size, root) of a note signed by `public`'s key for its origin.

    Raises:
        CheckpointInvalid: malformed, another origin or key, or a signature that fails.
    """
    body, blank, signatures = note.partition("\n\n")
    lines = body.split("\n")
    origin = origin_for(public)
    if not blank or len(lines) != 3 or lines[0] != origin:
        raise CheckpointInvalid("not a checkpoint note of this log")
    try:
        size, root = int(lines[1]), base64.b64decode(lines[2], validate=True)
    except (ValueError, binascii.Error) as exc:
        raise CheckpointInvalid("checkpoint size or root malformed") from exc
    if size < 0 or len(root) != 32 or lines[1] != str(size):
        raise CheckpointInvalid("checkpoint size or root malformed")
    expected_hash = _key_hash(origin, public)
    for line in signatures.split("\n"):
        prefix = f"{_DASH} {origin} "
        if not line.startswith(prefix):
            continue
        try:
            blob = base64.b64decode(line[len(prefix) :], validate=True)
        except binascii.Error:
            continue
        if blob[:4] == expected_hash and public.verifies((body + "\n").encode(), blob[4:]):
            return size, root
    raise CheckpointInvalid("no signature of this key verifies the checkpoint")
