"""The blind lexical index: postings of keyed term hashes, never plaintext terms.

Terms are HMACs under the scope's index key, so the index reveals nothing without the root
key, and a query can only match inside its own scope.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from engram_memory.contract.exceptions import CommitOutcomeUnknown, StoreUnavailable
from engram_memory.core.runtime import CallContext
from engram_memory.core.semantic_index import record_semantics
from engram_memory.search.fields import TermKey, document_terms, keyed_term_hasher
from engram_memory.store import memory, side_writes
from engram_memory.store.index_changes import DocumentIndexed, PostingBatch, RecordEmbedded
from engram_memory.store.transaction import Transaction

log = logging.getLogger("engram_memory.index")


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
    postings: tuple[PostingBatch, ...]  # at most POSTINGS_PER_BATCH each
    # The semantic projections' share (None: no semantic channel configured); never stored.
    embedding: RecordEmbedded | None = None


# Staging commits each batch on its own (`staged_index`). DuckDB serializes COMMITs, so the
# larger a staged commit, the longer every other call's COMMIT waits behind it: 60k postings
# in one commit held others' commits 60-400 ms (2 busy cores); a batch of this size ~10-50 ms.
POSTINGS_PER_BATCH = 8192
# Below this many postings a record is indexed inside the accept transaction: a few thousand
# rows cost the writer a few milliseconds, less than a side transaction's own COMMIT and fsync.
STAGE_FROM_POSTINGS = 4096


def record_index(ctx: CallContext, record: Mapping[str, Any]) -> RecordIndex:
    """The keyed postings and field lengths of `record`, and its text and keyed citations for
    the semantic projections when the channel is configured (no store access)."""
    term_key = scope_term_key(ctx)
    terms = document_terms(record, term_key)
    index = ctx.services.search_index
    semantic = None if index is None else index.semantic
    valid_time = record["valid_time"]
    postings = [
        (term, field_name, count)
        for field_name, field in terms.fields.items()
        for term, count in field.counts.items()
    ]
    return RecordIndex(
        record_id=str(record["record_id"]),
        field_lengths={name: field.length for name, field in terms.fields.items()},
        valid_t_end=None if "t_end" not in valid_time else int(valid_time["t_end"]),
        postings=tuple(
            memory.posting_batch(postings[start : start + POSTINGS_PER_BATCH])
            for start in range(0, len(postings), POSTINGS_PER_BATCH)
        ),
        embedding=(None if semantic is None else record_semantics(ctx.scope_ref, record, term_key)),
    )


@dataclass(frozen=True)
class StagedIndex:
    """A record's index entries, already committed by `staged_index` (invisible until the
    record row commits): the accept transaction writes none, but hands `entries` to the
    in-process search index when it commits."""

    record_id: str
    entries: RecordIndex


@contextmanager
def staged_index(ctx: CallContext, prepared: RecordIndex) -> Iterator[StagedIndex | RecordIndex]:
    """Commit a large record's index rows outside the writer's lock, then run the block (the
    accept transaction); a small record's entries are handed back for the accept transaction
    to write (`STAGE_FROM_POSTINGS`). Call it inside the record's `item_keys.fresh_key` block:
    its claim keeps every other call of this process off the record id.

    The first transaction removes leftovers of an earlier failed or unknown attempt and
    writes the document row with the first batch of postings, so postings are never doubled
    and never exist without their document row (which is how leftovers are found); each
    further batch commits on its own (`POSTINGS_PER_BATCH`). If staging fails, or the block
    commits nothing on this thread (rolled back, refused or replayed), the staged rows are
    removed again, best effort; after an unknown outcome they stay, for a retry's staging or
    the start-up sweep (`side_writes.sweep_orphan_index`). Search cannot see them meanwhile:
    eligibility joins the record row.

    Raises:
        StoreCorrupt / StoreUnavailable: the staging failed (nothing of the call committed).
    """
    if sum(batch.count for batch in prepared.postings) < STAGE_FROM_POSTINGS:
        yield prepared
        return
    database = ctx.services.database
    commits_before = database.commits_on_this_thread()
    unknown = False
    try:
        with database.side_write() as tx:
            side_writes.remove_staged(tx, ctx.scope_ref, prepared.record_id)
            _store(tx, ctx, prepared, prepared.postings[:1])
        for batch in prepared.postings[1:]:
            with database.side_write() as tx:
                memory.insert_postings(tx, ctx.scope_ref, prepared.record_id, batch)
        ctx.services.settings.failpoints.kill_after_staging(ctx.tool)
        yield StagedIndex(prepared.record_id, prepared)
    except CommitOutcomeUnknown:
        unknown = True
        raise
    finally:
        if not unknown and database.commits_on_this_thread() == commits_before:
            _unstage(ctx, prepared.record_id)


def _unstage(ctx: CallContext, record_id: str) -> None:
    try:
        with ctx.services.database.side_write() as tx:
            side_writes.remove_staged(tx, ctx.scope_ref, record_id)
    except StoreUnavailable:
        log.warning("staged index rows not removed tool=%s; the next start removes them", ctx.tool)


def index_record(
    tx: Transaction,
    ctx: CallContext,
    record: Mapping[str, Any],
    prepared: RecordIndex | StagedIndex | None = None,
) -> None:
    """Store the index entries of `record`, computing them here unless `prepared`; nothing
    when they were staged (`staged_index`).

    Raises:
        ValueError: the staged entries are another record's (a programming error).
    """
    if isinstance(prepared, StagedIndex):
        if prepared.record_id != str(record["record_id"]):
            raise ValueError("the staged index belongs to another record")
        entries = prepared.entries
        tx.note_index_change(
            DocumentIndexed(
                ctx.scope_ref, entries.record_id, entries.field_lengths, entries.postings
            )
        )
    else:
        entries = record_index(ctx, record) if prepared is None else prepared
        _store(tx, ctx, entries, entries.postings)
    if entries.embedding is not None:
        tx.note_index_change(entries.embedding)


def _store(
    tx: Transaction,
    ctx: CallContext,
    entries: RecordIndex,
    batches: Sequence[PostingBatch],
) -> None:
    memory.index_document(
        tx, ctx.scope_ref, entries.record_id, entries.field_lengths, entries.valid_t_end, batches
    )


def purge_record(tx: Transaction, ctx: CallContext, record_id: str) -> None:
    memory.purge_document(tx, ctx.scope_ref, record_id)
