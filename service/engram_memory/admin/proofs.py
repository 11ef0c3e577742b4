"""`audit prove` and `audit verify-proof`: Merkle proofs an auditor checks alone.

`prove` reads the audit entry hashes of a stopped store (read-only), builds an inclusion
proof of one entry, or a consistency proof between two tree sizes (core/merkle.py), and
signs checkpoint notes of the sizes involved with the checkpoint key (core/tlog_note.py).
`verify-proof` needs only the proof document, which carries those notes, and the
checkpoint public key: no store, no export.

Proof documents (JSON):
    {"format": "engram-inclusion-proof/1", "entry": <sequence>, "entry_hash": "sha256:...",
     "tree_size": n, "proof": [base64 hashes], "checkpoint": "<signed note>"}
    {"format": "engram-consistency-proof/1", "old_size": m, "new_size": n,
     "proof": [base64 hashes], "old_checkpoint": "<note>", "checkpoint": "<note>"}
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

from engram_memory.contract.exceptions import ConfigurationError, ProofInvalid
from engram_memory.core import merkle
from engram_memory.core.tlog_note import open_checkpoint, sign_checkpoint
from engram_memory.crypto.checkpoint_key import CheckpointPublicKey, CheckpointSigningKey
from engram_memory.store import checkpoints as rows
from engram_memory.store.database import Database

INCLUSION = "engram-inclusion-proof/1"
CONSISTENCY = "engram-consistency-proof/1"


def _leaves(data_dir: Path, size: int | None = None) -> list[bytes]:
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            head = rows.last_sequence(tx)
            hashes = rows.entry_hashes(tx, 1, head if size is None else size)
    finally:
        database.close()
    return [merkle.entry_leaf(hashes[s]) for s in sorted(hashes)]


def _b64(values: list[bytes]) -> list[str]:
    return [base64.b64encode(v).decode("ascii") for v in values]


def prove_inclusion(data_dir: Path, entry: int, key: CheckpointSigningKey) -> dict[str, Any]:
    """The inclusion proof of audit entry `entry` in today's tree.

    Raises:
        ConfigurationError: no such entry.
    """
    leaves = _leaves(data_dir)
    if not 1 <= entry <= len(leaves):
        raise ConfigurationError(f"no audit entry {entry} (the trail has {len(leaves)})")
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            entry_hash = rows.entry_hash_at(tx, entry)
    finally:
        database.close()
    return {
        "format": INCLUSION,
        "entry": entry,
        "entry_hash": entry_hash,
        "tree_size": len(leaves),
        "proof": _b64(merkle.inclusion_proof(entry - 1, leaves)),
        "checkpoint": sign_checkpoint(len(leaves), merkle.root(leaves), key),
    }


def prove_consistency(
    data_dir: Path, old_size: int, new_size: int, key: CheckpointSigningKey
) -> dict[str, Any]:
    """The proof that the tree of `old_size` entries is a prefix of the one of `new_size`.

    Raises:
        ConfigurationError: sizes out of order or beyond the trail.
    """
    leaves = _leaves(data_dir)
    if not 0 < old_size <= new_size <= len(leaves):
        raise ConfigurationError(
            f"need 0 < OLD <= NEW <= {len(leaves)} (the trail's size); got {old_size}, {new_size}"
        )
    newer = leaves[:new_size]
    return {
        "format": CONSISTENCY,
        "old_size": old_size,
        "new_size": new_size,
        "proof": _b64(merkle.consistency_proof(old_size, newer)),
        "old_checkpoint": sign_checkpoint(old_size, merkle.root(newer[:old_size]), key),
        "checkpoint": sign_checkpoint(new_size, merkle.root(newer), key),
    }


def _hashes(document: dict[str, Any]) -> list[bytes]:
    proof = document.get("proof")
    if not isinstance(proof, list):
        raise ProofInvalid("proof is not a list")
    try:
        return [base64.b64decode(str(p), validate=True) for p in proof]
    except binascii.Error as exc:
        raise ProofInvalid("proof holds a hash that is not base64") from exc


def verify_proof(document: dict[str, Any], public: CheckpointPublicKey) -> str:
    """Check a proof document with only `public`; return what it proved, one line.

    Raises:
        CheckpointInvalid: a checkpoint note is not signed by `public` (exit 5).
        ProofInvalid: the proof does not lead to the signed root(s) (exit 1).
    """
    kind = document.get("format")
    if kind == INCLUSION:
        size, root = open_checkpoint(str(document.get("checkpoint")), public)
        entry, entry_hash = document.get("entry"), document.get("entry_hash")
        if not isinstance(entry, int) or not isinstance(entry_hash, str):
            raise ProofInvalid("entry or entry_hash missing")
        if document.get("tree_size") != size:
            raise ProofInvalid("tree_size differs from the signed checkpoint")
        merkle.verify_inclusion(
            merkle.entry_leaf(entry_hash), entry - 1, size, _hashes(document), root
        )
        return f"entry {entry} ({entry_hash}) is in the signed tree of {size} entries"
    if kind == CONSISTENCY:
        old_size, old_root = open_checkpoint(str(document.get("old_checkpoint")), public)
        new_size, new_root = open_checkpoint(str(document.get("checkpoint")), public)
        merkle.verify_consistency(old_size, new_size, old_root, new_root, _hashes(document))
        return f"the signed tree of {old_size} entries is a prefix of the one of {new_size}"
    raise ProofInvalid("not a proof document of a known format")


def read_document(path: Path) -> dict[str, Any]:
    """Raises: ConfigurationError: unreadable or not a JSON object."""
    try:
        document = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path}: not a readable JSON document") from exc
    if not isinstance(document, dict):
        raise ConfigurationError(f"{path}: not a JSON object")
    return document
