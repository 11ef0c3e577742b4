"""The audit trail as an RFC 9162 (Certificate Transparency v2) Merkle tree: hashing, and
inclusion and consistency proofs with their verification (RFC 9162 §2.1).

Leaf `i` (0-based) is audit entry `i + 1`; its data is the entry's `entry_hash` text
(`sha256:<hex>`, UTF-8), which already binds every column of the entry. Hashes are SHA-256
with the RFC's domain separation: a leaf is H(0x00 || data), a node H(0x01 || left || right).
Pure functions over lists of leaf hashes: the store and the signatures are elsewhere
(admin/proofs.py, core/tlog_note.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from engram_memory.contract.exceptions import ProofInvalid


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def entry_leaf(entry_hash: str) -> bytes:
    """The leaf hash of an audit entry, from its `entry_hash`."""
    return leaf_hash(entry_hash.encode("utf-8"))


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    k = 1
    while k << 1 < n:
        k <<= 1
    return k


def root(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]) over leaf hashes; the empty tree's root is SHA-256 of nothing."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    level = list(leaves)
    # Pairing left to right and carrying an odd last node up unchanged builds the same
    # tree as the RFC's split at the largest power of two.
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


class Frontier:
    """The roots of the perfect subtrees that cover a growing tree's leaves, largest first:
    appending a leaf and reading the root cost O(log n), so the checkpoint writer extends the
    tree with the entries since its last checkpoint instead of rehashing the whole trail."""

    def __init__(self) -> None:
        self.size = 0
        self._peaks: list[tuple[int, bytes]] = []  # (height, subtree root)

    def append(self, leaf: bytes) -> None:
        height, node = 0, leaf
        while self._peaks and self._peaks[-1][0] == height:
            node = node_hash(self._peaks.pop()[1], node)
            height += 1
        self._peaks.append((height, node))
        self.size += 1

    def root(self) -> bytes:
        """MTH of the leaves appended: the RFC's split at the largest power of two is the
        peaks folded from the smallest."""
        if not self._peaks:
            return hashlib.sha256(b"").digest()
        node = self._peaks[-1][1]
        for _, left in reversed(self._peaks[:-1]):
            node = node_hash(left, node)
        return node


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PATH(m, D[n]) (RFC 9162 §2.1.3.1) for 0 <= index < len(leaves)."""
    if not 0 <= index < len(leaves):
        raise ValueError("index outside the tree")
    if len(leaves) == 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return [*inclusion_proof(index, leaves[:k]), root(leaves[k:])]
    return [*inclusion_proof(index - k, leaves[k:]), root(leaves[:k])]


def consistency_proof(old_size: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) (RFC 9162 §2.1.4.1) for 0 < old_size <= len(leaves)."""
    if not 0 < old_size <= len(leaves):
        raise ValueError("old size outside the tree")
    return _subproof(old_size, leaves, True)


def _subproof(m: int, leaves: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [root(leaves)]
    k = _split(n)
    if m <= k:
        return [*_subproof(m, leaves[:k], complete), root(leaves[k:])]
    return [*_subproof(m - k, leaves[k:], False), root(leaves[:k])]


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], expected_root: bytes
) -> None:
    """RFC 9162 §2.1.3.2.

    Raises:
        ProofInvalid: the proof does not lead from the leaf to `expected_root`.
    """
    if not 0 <= index < size:
        raise ProofInvalid("entry outside the tree")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofInvalid("inclusion proof too long")
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or r != expected_root:
        raise ProofInvalid("inclusion proof does not lead to the signed root")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 §2.1.4.2.

    Raises:
        ProofInvalid: the older tree is not a prefix of the newer one under these roots.
    """
    if not 0 < old_size <= new_size:
        raise ProofInvalid("sizes out of order")
    if old_size == new_size:
        if proof or old_root != new_root:
            raise ProofInvalid("equal sizes need equal roots and an empty proof")
        return
    if not proof:
        raise ProofInvalid("consistency proof empty")
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root starts the path
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofInvalid("consistency proof too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise ProofInvalid("consistency proof does not join the two signed roots")
