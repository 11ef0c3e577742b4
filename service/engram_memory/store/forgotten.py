"""The rows that hold the content digests of forgotten items (issue 9 item 7).

A tombstoned record, the candidate it was promoted from, and a withdrawn candidate keep only
keyed forms of `payload_digest`, `guard_digest` and `record_digest`; the keying itself is in
core/forgotten.py (it needs the scope's key). The decision inputs kept for policy replay that
name those digests are dropped. This module only reads and writes the rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram_memory.store.connection import load_queries
from engram_memory.store.index_changes import RecordStateSet
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "forgotten.sql")


@dataclass(frozen=True)
class ContentDigests:
    """The three digests of one item's content, plain or keyed."""

    payload: str
    guard: str
    record: str


@dataclass(frozen=True)
class PlainRow:
    """A forgotten item's row that still holds a plain digest (a store from before)."""

    table: str  # "records" | "candidates"
    scope_ref: str
    item_id: str
    digests: ContentDigests


def replace_record_digests(
    tx: Transaction, scope_ref: str, record_id: str, digests: ContentDigests
) -> None:
    """Raises: StoreUnavailable: the statement failed (the caller's transaction rolls back)."""
    tx.execute(
        _Q["key_record"], [digests.payload, digests.guard, digests.record, scope_ref, record_id]
    )


def tombstone_record(
    tx: Transaction, scope_ref: str, record_id: str, now_ms: int, keyed: ContentDigests
) -> None:
    """Tombstone a record, drop its body and keep only `keyed` digests, in one statement.

    Raises:
        StoreUnavailable: the statement failed (the caller's transaction rolls back).
    """
    tx.execute(
        _Q["tombstone_record_keyed"],
        [now_ms, keyed.payload, keyed.guard, keyed.record, scope_ref, record_id],
    )
    tx.note_index_change(RecordStateSet(scope_ref, record_id, "tombstoned"))


def replace_candidate_digests(
    tx: Transaction, scope_ref: str, candidate_id: str, digests: ContentDigests
) -> None:
    """Raises: StoreUnavailable: the statement failed (the caller's transaction rolls back)."""
    tx.execute(
        _Q["key_candidate"],
        [digests.payload, digests.guard, digests.record, scope_ref, candidate_id],
    )


def drop_kept_inputs(tx: Transaction, scope_ref: str, digests: ContentDigests) -> None:
    """Drop the kept decision inputs of `scope_ref` that hold one of the plain `digests`.

    Raises:
        StoreUnavailable: the statement failed (the caller's transaction rolls back).
    """
    tx.execute(_Q["drop_kept_inputs"], [scope_ref, digests.payload, digests.guard, digests.record])


def plain_forgotten_rows(tx: Transaction) -> list[PlainRow]:
    """Tombstoned records, withdrawn candidates and the candidates of tombstoned records that
    still hold a plain digest.

    Raises:
        StoreUnavailable: a query failed.
    """
    found: list[PlainRow] = []
    for table, query in (
        ("records", "plain_forgotten_records"),
        ("candidates", "plain_forgotten_candidates"),
    ):
        for scope_ref, item_id, payload, guard, record in tx.fetchall(_Q[query]):
            digests = ContentDigests(str(payload), str(guard), str(record))
            found.append(PlainRow(table, str(scope_ref), str(item_id), digests))
    return found
