"""Reads the bulk import makes once per batch instead of once per line (bulk/importer.py).

Each answers, for a whole batch, a question the tools ask per call; the import uses the
answer only to skip a per-line lookup that could not find anything, never to decide.
"""

from __future__ import annotations

from collections.abc import Sequence

from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "bulk_reads.sql")


def known_idempotency_keys(
    tx: Transaction, scope_ref: str, principal_ref: str, key_digests: Sequence[str]
) -> set[str]:
    """The digests among `key_digests` with a stored result for (scope, principal).

    Raises:
        StoreUnavailable: the query failed.
    """
    if not key_digests:
        return set()
    rows = tx.fetchall(_Q["known_idempotency_keys"], [scope_ref, principal_ref, list(key_digests)])
    return {str(row[0]) for row in rows}


def any_tombstone(tx: Transaction, scope_ref: str) -> bool:
    """True when the scope holds a tombstoned record (the forget guard could match).

    Raises:
        StoreUnavailable: the query failed.
    """
    row = tx.fetchone(_Q["any_tombstone"], [scope_ref])
    return bool(row and row[0])
