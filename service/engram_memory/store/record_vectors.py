"""The semantic channel's vectors kept in the store (migration 0011), sealed by the caller
(crypto/vector_seal.py): written after the commit by the embedder, read at open, deleted with
the record's lexical document (store/memory.py `purge_document`).
"""

from __future__ import annotations

from collections.abc import Sequence

from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "record_vectors.sql")

KeptVector = tuple[str, bytes, str]  # (record_id, sealed vector, citation keys space-separated)


def keep_vectors(
    tx: Transaction, scope_ref: str, model_ref: str, vectors: Sequence[KeptVector]
) -> None:
    """Write `vectors` of records whose lexical document still exists (one statement).

    Raises:
        StoreCorrupt / StoreUnavailable: as for every statement.
    """
    if not vectors:
        return
    tx.execute(_Q["drop_other_models"], [scope_ref, model_ref])
    tx.execute(
        _Q["keep_vectors"],
        [
            scope_ref,
            model_ref,
            [record_id for record_id, _, _ in vectors],
            [sealed for _, sealed, _ in vectors],
            [keys for _, _, keys in vectors],
        ],
    )


def kept_vectors(tx: Transaction, scope_ref: str, model_ref: str) -> list[KeptVector]:
    """Every kept vector of `model_ref` of the indexed records of `scope_ref`."""
    return [
        (str(record_id), bytes(sealed), str(keys))
        for record_id, sealed, keys in tx.fetchall(_Q["kept_vectors"], [scope_ref, model_ref])
    ]


def sealed_bodies(
    tx: Transaction, scope_ref: str, record_ids: Sequence[str]
) -> list[tuple[str, bytes]]:
    """The sealed bodies of those of `record_ids` still indexed in `scope_ref`."""
    return [
        (str(record_id), bytes(sealed))
        for record_id, sealed in tx.fetchall(_Q["bodies_of"], [scope_ref, list(record_ids)])
    ]
