"""`audit prove` and `audit verify-proof`: Merkle proofs an auditor checks alone.

`prove` reads the audit entry hashes of a stopped store (read-only), builds an inclusion
proof of one entry, or a consistency proof between two tree sizes (core/merkle.py), and
attaches a checkpoint note of each size involved: the note of a checkpoint the service
stored earlier at that size (core/checkpoints.py, format 2) when there is one, else one
signed now with the checkpoint key (core/tlog_note.py). `verify-proof` needs only the proof
document, which carries those notes, and the checkpoint public key: no store, no export;
given a checkpoint the auditor kept (`kept`), it checks the proof against that one instead.

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
from engram_memory.core.checkpoints import signed_tree, verify_signature
from engram_memory.core.tlog_note import open_checkpoint, sign_checkpoint
from engram_memory.crypto.checkpoint_key import CheckpointPublicKey, CheckpointSigningKey
from engram_memory.store import checkpoints as rows
from engram_memory.store.database import Database

INCLUSION = "engram-inclusion-proof/1"
CONSISTENCY = "engram-consistency-proof/1"


def _leaves(data_dir: Path) -> tuple[list[bytes], dict[int, str]]:
    """Every entry's leaf hash, and the note of the newest stored checkpoint per tree size."""
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            head = rows.last_sequence(tx)
            hashes = rows.entry_hashes(tx, 1, head)
            stored = rows.stored_documents(tx)
    finally:
        database.close()
    notes: dict[int, str] = {}
    for text in stored:  # oldest first: a later checkpoint of the same size wins
        tree = json.loads(text).get("tree")
        if isinstance(tree, dict) and isinstance(tree.get("size"), int):
            notes[int(tree["size"])] = str(tree.get("note"))
    return [merkle.entry_leaf(hashes[s]) for s in sorted(hashes)], notes


def _note(
    size: int, leaves: list[bytes], stored: dict[int, str], key: CheckpointSigningKey | None
) -> str:
    """The checkpoint note of the tree of `size` entries: the one stored when the service
    signed that size (a trail rewritten since no longer matches it), else signed now.

    Raises:
        ConfigurationError: none is stored and no key is given.
    """
    if size in stored:
        return stored[size]
    if key is None:
        raise ConfigurationError(
            f"no checkpoint of {size} entries is stored: pass --checkpoint-key to sign one now"
        )
    return sign_checkpoint(size, merkle.root(leaves[:size]), key)


def _b64(values: list[bytes]) -> list[str]:
    return [base64.b64encode(v).decode("ascii") for v in values]


def prove_inclusion(
    data_dir: Path, entry: int, key: CheckpointSigningKey | None, tree_size: int | None = None
) -> dict[str, Any]:
    """The inclusion proof of audit entry `entry` in the tree of `tree_size` entries (None:
    today's tree).

    Raises:
        ConfigurationError: no such entry or size; no note for the size (see `_note`).
    """
    leaves, stored = _leaves(data_dir)
    size = len(leaves) if tree_size is None else tree_size
    if not 1 <= entry <= size <= len(leaves):
        raise ConfigurationError(
            f"need 1 <= ENTRY <= tree size <= {len(leaves)} (the trail's size); got {entry}, {size}"
        )
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
        "tree_size": size,
        "proof": _b64(merkle.inclusion_proof(entry - 1, leaves[:size])),
        "checkpoint": _note(size, leaves, stored, key),
    }


def prove_consistency(
    data_dir: Path, old_size: int, new_size: int, key: CheckpointSigningKey | None
) -> dict[str, Any]:
    """The proof that the tree of `old_size` entries is a prefix of the one of `new_size`.

    Raises:
        ConfigurationError: sizes out of order or beyond the trail; no note for a size.
    """
    leaves, stored = _leaves(data_dir)
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
        "old_checkpoint": _note(old_size, leaves, stored, key),
        "checkpoint": _note(new_size, leaves, stored, key),
    }


def _hashes(document: dict[str, Any]) -> list[bytes]:
    proof = document.get("proof")
    if not isinstance(proof, list):
        raise ProofInvalid("proof is not a list")
    try:
        return [base64.b64decode(str(p), validate=True) for p in proof]
    except binascii.Error as exc:
        raise ProofInvalid("proof holds a hash that is not base64") from exc


def verify_proof(
    document: dict[str, Any], public: CheckpointPublicKey, kept: str | None = None
) -> str:
    """Check a proof document with only `public`; return what it proved, one line. With
    `kept` (the note of a checkpoint the auditor kept), the proof must lead to that
    checkpoint's root instead of the one it carries for the same size.

    Raises:
        CheckpointInvalid: a checkpoint note is not signed by `public` (exit 5).
        ProofInvalid: the proof does not lead to the signed root(s), or `kept` is of none
            of the proof's sizes (exit 1).
    """
    kind = document.get("format")
    signed = None if kept is None else open_checkpoint(kept, public)
    if kind == INCLUSION:
        size, root = open_checkpoint(str(document.get("checkpoint")), public)
        if signed is not None:
            if signed[0] != size:
                raise ProofInvalid("the kept checkpoint is of another tree size")
            root = signed[1]
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
        if signed is not None:
            if signed[0] not in (old_size, new_size):
                raise ProofInvalid("the kept checkpoint is of neither tree size")
            old_root = signed[1] if signed[0] == old_size else old_root
            new_root = signed[1] if signed[0] == new_size else new_root
        merkle.verify_consistency(old_size, new_size, old_root, new_root, _hashes(document))
        return f"the signed tree of {old_size} entries is a prefix of the one of {new_size}"
    raise ProofInvalid("not a proof document of a known format")


def kept_note(path: Path, public: CheckpointPublicKey) -> str:
    """The note of a checkpoint the auditor kept: a checkpoint.json of format 2 (its JSON
    signature and tree checked), or the note text itself (checked when it is used).

    Raises:
        ConfigurationError: unreadable, or a JSON checkpoint without a tree (format 1).
        CheckpointInvalid: a JSON checkpoint not signed by `public`, or whose tree differs
            from its note or head.
    """
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{path}: not readable") from exc
    if not text.lstrip().startswith("{"):
        return text
    document = read_document(path)
    verify_signature(document, public)
    if signed_tree(document, public) is None:
        raise ConfigurationError(f"{path}: a checkpoint of format 1 carries no tree")
    return str(document["tree"]["note"])


def read_document(path: Path) -> dict[str, Any]:
    """Raises: ConfigurationError: unreadable or not a JSON object."""
    try:
        document = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path}: not a readable JSON document") from exc
    if not isinstance(document, dict):
        raise ConfigurationError(f"{path}: not a JSON object")
    return document
