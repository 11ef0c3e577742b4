"""Reading the lexical index out of the store: every scope's records and postings as
columns, ordered the way `ScopeIndex.bulk_load` takes them (a 100k-record scope loads in
seconds: no Python object per posting). Used by a load before serving and by the load that
runs beside it (core/index_loading.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engram_memory.search.columns import FIELD_SHIFT, SLOT_SHIFT, Int64s
from engram_memory.search.scope_index import ScopeIndex
from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "search_index.sql")


def indexed_scopes(tx: Transaction) -> list[str]:
    """The scopes holding indexed documents (a load's first read: its snapshot begins)."""
    return [str(row[0]) for row in tx.fetchall(_Q["indexed_scopes"])]


def load_scopes(tx: Transaction, scope_refs: Sequence[str]) -> dict[str, ScopeIndex]:
    """Each scope's index from the store, read as columns (a 100k-record scope loads in
    seconds: no Python object per posting)."""
    scopes: dict[str, ScopeIndex] = {}
    for scope_ref in scope_refs:
        records = tx.fetch_columns(_Q["indexed_records"], [scope_ref])
        postings = tx.fetch_columns(_Q["indexed_postings"], [scope_ref, SLOT_SHIFT, FIELD_SHIFT])
        terms = [str(row[0]) for row in tx.fetchall(_Q["indexed_terms"], [scope_ref])]
        term_ranks, packed = _by_term_then_slot(
            np.asarray(postings["term"], dtype=np.int64),
            np.asarray(postings["packed"], dtype=np.int64),
        )
        scope = ScopeIndex()
        scope.bulk_load(
            [str(record_id) for record_id in records["record_id"]],
            current=np.asarray(records["current"], dtype=np.bool_),
            accept=np.asarray(records["accept"], dtype=np.int64),
            recorded=np.asarray(records["recorded"], dtype=np.int64),
            valid_t=np.asarray(records["valid_t"], dtype=np.int64),
            valid_end=np.asarray(records["valid_end"], dtype=np.int64),
            expires=np.asarray(records["expires"], dtype=np.int64),
            lengths=np.stack(
                [np.asarray(records[f"l{i}"], dtype=np.int64) for i in range(5)], axis=1
            ).reshape(-1, 5),
            terms=terms,
            term_ranks=term_ranks,
            packed=packed,
        )
        scopes[str(scope_ref)] = scope
    return scopes


def _by_term_then_slot(term_ranks: Int64s, packed: Int64s) -> tuple[Int64s, Int64s]:
    """The postings ordered by term rank, then packed (slot, field): a stable sort by rank
    (radix, on ranks narrowed to 16 bits when they fit) of postings in packed order, which
    they mostly arrive in already (postings are written record by record, in slot order)."""
    if len(packed) > 1 and not bool(np.all(packed[1:] >= packed[:-1])):
        order = np.argsort(packed, kind="stable")
        term_ranks, packed = term_ranks[order], packed[order]
    narrow = len(term_ranks) > 0 and int(term_ranks.max()) < 1 << 16
    order = np.argsort(term_ranks.astype(np.uint16) if narrow else term_ranks, kind="stable")
    return term_ranks[order], packed[order]


def index_fingerprint(tx: Transaction) -> list[tuple[str, str, int, str]]:
    """Per scope, the count and hash sum of the rows the index is read from (indexed records
    with their documents, postings): equal only while none of them changed."""
    return [
        (str(part), str(scope_ref), int(count), str(digest))
        for part, scope_ref, count, digest in tx.fetchall(_Q["index_fingerprint"])
    ]
