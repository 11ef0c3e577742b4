"""The blind lexical index: postings of keyed term hashes, never plaintext terms.

Terms are HMACs under the scope's index key, so the index reveals nothing without the root
key, and a query can only match inside its own scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engram_memory.core.runtime import CallContext
from engram_memory.search.fields import TermKey, document_terms, keyed_term_hasher
from engram_memory.store import memory
from engram_memory.store.database import Transaction


def scope_term_key(ctx: CallContext) -> TermKey:
    return keyed_term_hasher(ctx.services.root_key.scope_index_key(ctx.scope_ref))


@dataclass(frozen=True)
class RecordIndex:
    """A record's index entries, computed before the write transaction that stores them.

    Tokenizing and keying the terms of a large record takes far longer than storing them;
    doing it outside keeps the writer's critical section short (one tenant's large admission
    must not stall everyone else's writes).
    """

    record_id: str
    field_lengths: dict[str, int]
    valid_t_end: int | None
    postings: memory.PostingBatch


def record_index(ctx: CallContext, record: Mapping[str, Any]) -> RecordIndex:
    """The keyed postings and field lengths of `record` (no store access)."""
    terms = document_terms(record, scope_term_key(ctx))
    valid_time = record["valid_time"]
    return RecordIndex(
        record_id=str(record["record_id"]),
        field_lengths={name: field.length for name, field in terms.fields.items()},
        valid_t_end=None if "t_end" not in valid_time else int(valid_time["t_end"]),
        postings=memory.posting_batch(
            [
                (term, field_name, count)
                for field_name, field in terms.fields.items()
                for term, count in field.counts.items()
            ]
        ),
    )


def index_record(
    tx: Transaction,
    ctx: CallContext,
    record: Mapping[str, Any],
    prepared: RecordIndex | None = None,
) -> None:
    """Store the index entries of `record`, computing them here unless `prepared`."""
    entries = record_index(ctx, record) if prepared is None else prepared
    memory.index_document(
        tx,
        ctx.scope_ref,
        entries.record_id,
        entries.field_lengths,
        entries.valid_t_end,
        entries.postings,
    )


def purge_record(tx: Transaction, ctx: CallContext, record_id: str) -> None:
    memory.purge_document(tx, ctx.scope_ref, record_id)
