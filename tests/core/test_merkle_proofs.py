"""Issue 22 item 5 (proofs): the RFC 9162 tree, its inclusion and consistency proofs and the
C2SP checkpoint notes (core/merkle.py, core/tlog_note.py), checked by a second, independent
implementation written here the other way round (the bit-decomposition verifier of the
transparency-dev Go module, the RFC's recursive tree hash, the signed-note key hash
computed from the C2SP text), so one implementation's mistake cannot hide in the other."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives import serialization

from engram_memory.contract.exceptions import CheckpointInvalid, ProofInvalid
from engram_memory.core import merkle
from engram_memory.core.tlog_note import open_checkpoint, sign_checkpoint
from engram_memory.crypto.checkpoint_key import CheckpointSigningKey

KEY = CheckpointSigningKey.generate()
OTHER = CheckpointSigningKey.generate()


# --- the second implementation ---------------------------------------------------------
def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return _h(b"\x01" + left + right)


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1, as written: split at the largest power of two below n."""
    if not leaves:
        return _h(b"")
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return _node(_mth(leaves[:k]), _mth(leaves[k:]))


def _decompose(index: int, size: int) -> tuple[int, int]:
    inner = (index ^ (size - 1)).bit_length()
    border = bin(index >> inner).count("1")
    return inner, border


def _chain_inner(seed: bytes, proof: list[bytes], index: int) -> bytes:
    for i, h in enumerate(proof):
        seed = _node(seed, h) if (index >> i) & 1 == 0 else _node(h, seed)
    return seed


def _chain_inner_right(seed: bytes, proof: list[bytes], index: int) -> bytes:
    for i, h in enumerate(proof):
        if (index >> i) & 1 == 1:
            seed = _node(h, seed)
    return seed


def _chain_border_right(seed: bytes, proof: list[bytes]) -> bytes:
    for h in proof:
        seed = _node(h, seed)
    return seed


def _root_from_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes]) -> bytes:
    inner, border = _decompose(index, size)
    assert len(proof) == inner + border
    return _chain_border_right(_chain_inner(leaf, proof[:inner], index), proof[inner:])


def _root_from_consistency(size1: int, size2: int, root1: bytes, proof: list[bytes]) -> bytes:
    inner, border = _decompose(size1 - 1, size2)
    shift = (size1 & -size1).bit_length() - 1
    inner -= shift
    seed, start = (root1, 0) if size1 == 1 << shift else (proof[0], 1)
    assert len(proof) == start + inner + border
    rest, mask = proof[start:], (size1 - 1) >> shift
    first = _chain_border_right(_chain_inner_right(seed, rest[:inner], mask), rest[inner:])
    assert first == root1
    return _chain_border_right(_chain_inner(seed, rest[:inner], mask), rest[inner:])


def _leaves(n: int) -> list[bytes]:
    return [merkle.entry_leaf(f"sha256:{i:064x}") for i in range(n)]


# --- tests -----------------------------------------------------------------------------
def test_the_root_is_the_rfc_tree_hash_for_every_size_up_to_70() -> None:
    for n in range(71):
        assert merkle.root(_leaves(n)) == _mth(_leaves(n))
    leaf = merkle.entry_leaf("sha256:" + "0" * 64)
    assert leaf == _h(b"\x00" + ("sha256:" + "0" * 64).encode())


def test_every_inclusion_proof_verifies_in_both_implementations() -> None:
    for size in range(1, 34):
        leaves = _leaves(size)
        root = _mth(leaves)
        for index in range(size):
            proof = merkle.inclusion_proof(index, leaves)
            assert _root_from_inclusion(index, size, leaves[index], proof) == root
            merkle.verify_inclusion(leaves[index], index, size, proof, root)


def test_every_consistency_proof_verifies_in_both_implementations() -> None:
    for new in range(1, 34):
        leaves = _leaves(new)
        for old in range(1, new + 1):
            proof = merkle.consistency_proof(old, leaves)
            old_root, new_root = _mth(leaves[:old]), _mth(leaves)
            merkle.verify_consistency(old, new, old_root, new_root, proof)
            if old < new:
                assert _root_from_consistency(old, new, old_root, proof) == new_root


def test_a_wrong_leaf_position_hash_or_root_fails_the_proof() -> None:
    leaves = _leaves(21)
    root = merkle.root(leaves)
    proof = merkle.inclusion_proof(7, leaves)
    for leaf, index, path, size in [
        (leaves[8], 7, proof, 21),
        (leaves[7], 8, proof, 21),
        (leaves[7], 7, [*proof[:-1], leaves[0]], 21),
        (leaves[7], 7, proof[:-1], 21),
        (leaves[7], 7, proof, 8),  # a proof longer than that tree has levels
        (leaves[7], 21, proof, 21),
    ]:
        with pytest.raises(ProofInvalid):
            merkle.verify_inclusion(leaf, index, size, path, root)
    consistency = merkle.consistency_proof(13, leaves)
    with pytest.raises(ProofInvalid):
        merkle.verify_consistency(13, 21, merkle.root(_leaves(13)), root, consistency[1:])
    forged = [*leaves[:5], merkle.entry_leaf("sha256:" + "f" * 64), *leaves[6:]]
    with pytest.raises(ProofInvalid):
        merkle.verify_consistency(13, 21, merkle.root(forged[:13]), root, consistency)


def test_a_checkpoint_note_is_c2sp_shaped_and_checked_with_only_the_public_key() -> None:
    root = merkle.root(_leaves(5))
    note = sign_checkpoint(5, root, KEY)
    body, _, signature_line = note.partition("\n\n")
    origin, size, encoded = body.split("\n")
    assert (int(size), base64.b64decode(encoded)) == (5, root)
    # The key hash and signature, recomputed from the C2SP signed-note text.
    dash, name, blob = signature_line.rstrip("\n").split(" ")
    assert (dash, name) == ("\u2014", origin)
    raw = KEY.public.public_key.public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    signed = base64.b64decode(blob)
    assert signed[:4] == _h(origin.encode() + b"\n\x01" + raw)[:4]
    KEY.public.public_key.verify(signed[4:], (body + "\n").encode())
    assert open_checkpoint(note, KEY.public) == (5, root)
    for forged in (note.replace("\n5\n", "\n6\n"), note.replace(blob, blob[:-4] + "AAA=")):
        with pytest.raises(CheckpointInvalid):
            open_checkpoint(forged, KEY.public)
    with pytest.raises(CheckpointInvalid):
        open_checkpoint(note, OTHER.public)
