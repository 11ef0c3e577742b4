"""The blind lexical index: postings of keyed term hashes, never plaintext terms.

Terms are HMACs under the scope's index key, so the index reveals nothing without the root
key, and a query can only match inside its own scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engram_memory.search.fields import TermKey, document_terms, keyed_term_hasher
from engram_memory.store import memory
from engram_memory.store.database import Transaction
from engram_memory.tools.runtime import CallContext


def scope_term_key(ctx: CallContext) -> TermKey:
    return keyed_term_hasher(ctx.services.root_key.scope_index_key(ctx.scope_ref))


def index_record(tx: Transaction, ctx: CallContext, record: Mapping[str, Any]) -> None:
    terms = document_terms(record, scope_term_key(ctx))
    postings = [
        (term, field_name, count)
        for field_name, field in terms.fields.items()
        for term, count in field.counts.items()
    ]
    valid_time = record["valid_time"]
    memory.index_document(
        tx,
        ctx.scope_ref,
        str(record["record_id"]),
        {name: field.length for name, field in terms.fields.items()},
        None if "t_end" not in valid_time else int(valid_time["t_end"]),
        postings,
    )


def purge_record(tx: Transaction, ctx: CallContext, record_id: str) -> None:
    memory.purge_document(tx, ctx.scope_ref, record_id)
