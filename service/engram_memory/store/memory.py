"""Candidates, records, item keys, the blind lexical index, idempotency and confirmations.

Every function runs inside the caller's transaction, so a tool's domain write, its journal
event, its idempotency result and its audit entry commit or fail together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engram_memory.store.connection import load_queries
from engram_memory.store.index_changes import (
    DocumentIndexed,
    DocumentPurged,
    PostingBatch,
    RecordAdmitted,
    RecordStateSet,
    RecordWritten,
)
from engram_memory.store.index_changes import (
    RecordRow as RecordRow,  # defined beside the change that carries it; read here
)
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "memory.sql")


@dataclass(frozen=True)
class CandidateRow:
    candidate_id: str
    state: str
    principal_ref: str
    payload_digest: str
    guard_digest: str
    record_digest: str
    record_id: str
    capture_cursor: int
    sealed_body: bytes | None  # None once the candidate ended (its key is destroyed too)


@dataclass(frozen=True)
class IdempotencyRow:
    tool: str
    operation_digest: str
    state: str
    result_json: str


@dataclass(frozen=True)
class IndexedDocument:
    record_id: str
    field_lengths: dict[str, int]
    valid_t_end: int | None


@dataclass(frozen=True)
class Posting:
    term_hash: str
    record_id: str
    field: str
    tf: int


# -- candidates -------------------------------------------------------------------------


def insert_candidate(tx: Transaction, scope_ref: str, row: CandidateRow, now_ms: int) -> None:
    tx.execute(
        _Q["insert_candidate"],
        [
            scope_ref,
            row.candidate_id,
            row.principal_ref,
            row.payload_digest,
            row.guard_digest,
            row.record_digest,
            row.record_id,
            row.capture_cursor,
            row.sealed_body,
            now_ms,
            now_ms,
        ],
    )


def _in_scope(rows: list[tuple[Any, ...]], scope_ref: str) -> tuple[Any, ...] | None:
    """The row of `scope_ref` among a point lookup's rows (its scope is the last column).

    Lookups select by one indexed id only, which is what makes DuckDB use the index; ids of
    other scopes that happen to collide are dropped here, so scopes stay isolated.
    """
    for row in rows:
        if row[-1] == scope_ref:
            return row
    return None


def get_candidate(tx: Transaction, scope_ref: str, candidate_id: str) -> CandidateRow | None:
    row = _in_scope(tx.fetchall(_Q["get_candidate"], [candidate_id]), scope_ref)
    if row is None:
        return None
    return CandidateRow(
        candidate_id=str(row[0]),
        state=str(row[1]),
        principal_ref=str(row[2]),
        payload_digest=str(row[3]),
        guard_digest=str(row[4]),
        record_digest=str(row[5]),
        record_id=str(row[6]),
        capture_cursor=int(row[7]),
        sealed_body=None if row[8] is None else bytes(row[8]),
    )


# -- records ----------------------------------------------------------------------------


def insert_record(
    tx: Transaction, scope_ref: str, candidate_id: str, row: RecordRow, now_ms: int
) -> None:
    tx.execute(
        _Q["insert_record"],
        [
            scope_ref,
            row.record_id,
            candidate_id,
            row.record_digest,
            row.payload_digest,
            row.guard_digest,
            row.recorded_cursor,
            row.accept_cursor,
            row.valid_t,
            row.valid_t_end,
            row.expires_at_ms,
            row.sealed_body,
            now_ms,
        ],
    )
    tx.note_index_change(
        RecordAdmitted(
            scope_ref,
            row.record_id,
            accept_cursor=row.accept_cursor,
            recorded_cursor=row.recorded_cursor,
            valid_t=row.valid_t,
            valid_t_end=row.valid_t_end,
            expires_at_ms=row.expires_at_ms,
        )
    )
    tx.note_index_change(RecordWritten(scope_ref, row))


def _record_row(row: tuple[Any, ...]) -> RecordRow:
    return RecordRow(
        record_id=str(row[0]),
        state=str(row[1]),
        record_digest=str(row[2]),
        payload_digest=str(row[3]),
        guard_digest=str(row[4]),
        recorded_cursor=int(row[5]),
        accept_cursor=int(row[6]),
        valid_t=int(row[7]),
        valid_t_end=None if row[8] is None else int(row[8]),
        expires_at_ms=None if row[9] is None else int(row[9]),
        sealed_body=None if row[10] is None else bytes(row[10]),
    )


def get_record(tx: Transaction, scope_ref: str, record_id: str) -> RecordRow | None:
    row = _in_scope(tx.fetchall(_Q["get_record"], [record_id]), scope_ref)
    return None if row is None else _record_row(row)


def get_records(tx: Transaction, scope_ref: str, record_ids: Sequence[str]) -> dict[str, RecordRow]:
    """Rows of the given ids in this scope, in one query (ids of other scopes are absent)."""
    if not record_ids:
        return {}
    rows = tx.fetchall(_Q["get_records"], [scope_ref, list(record_ids)])
    return {str(row[0]): _record_row(row) for row in rows}


def get_records_by_id(
    tx: Transaction, scope_ref: str, record_ids: Sequence[str]
) -> dict[str, RecordRow]:
    """Rows of a few ids (a search page) in this scope, by index lookups: an `IN` list of
    constants is served by the `record_id` index, a list parameter would scan the table."""
    if not record_ids:
        return {}
    placeholders = ", ".join("?" for _ in record_ids)
    rows = tx.fetchall(_Q["get_records_by_id"].replace("$ids", placeholders), list(record_ids))
    return {str(row[0]): _record_row(row) for row in rows if row[11] == scope_ref}


def set_record_state(
    tx: Transaction,
    scope_ref: str,
    record_id: str,
    state: str,
    now_ms: int,
    successor_id: str | None = None,
) -> None:
    tx.execute(_Q["set_record_state"], [state, successor_id, now_ms, scope_ref, record_id])
    tx.note_index_change(RecordStateSet(scope_ref, record_id, state))


def successor_of(tx: Transaction, scope_ref: str, record_id: str) -> str | None:
    row = _in_scope(tx.fetchall(_Q["get_successor"], [record_id]), scope_ref)
    return None if row is None or row[0] is None else str(row[0])


def expired_record_ids(tx: Transaction, scope_ref: str, now_ms: int) -> list[str]:
    """Live records whose `expires_at` has passed (reads already hide them; SPEC §8)."""
    return [str(row[0]) for row in tx.fetchall(_Q["expired_records"], [scope_ref, now_ms])]


def matches_tombstoned_content(
    tx: Transaction, scope_ref: str, payload_digest: str, guard_digest: str
) -> bool:
    row = tx.fetchone(_Q["tombstoned_digest_match"], [scope_ref, payload_digest, guard_digest])
    return bool(row and row[0])


# -- blind lexical index --------------------------------------------------------------------


def posting_batch(postings: Sequence[tuple[str, str, int]]) -> PostingBatch:
    """Pack (term_hash, field, tf) postings into space-separated columns.

    DuckDB binds and splits three strings far faster than three lists of tens of thousands
    of Python strings; build the batch before the write transaction.

    Raises:
        ValueError: a term contains a space (keyed terms are hex; a separator inside one
            would shift every later posting).
    """
    terms = " ".join(term for term, _, _ in postings)
    if postings and terms.count(" ") != len(postings) - 1:
        raise ValueError("a term holds the posting separator")
    return PostingBatch(
        count=len(postings),
        terms=terms,
        fields=" ".join(field for _, field, _ in postings),
        counts=" ".join(str(tf) for _, _, tf in postings),
    )


def index_document(
    tx: Transaction,
    scope_ref: str,
    record_id: str,
    field_lengths: Mapping[str, int],
    valid_t_end: int | None,
    postings: Sequence[PostingBatch],
) -> None:
    """Index one record: its document row, and one insert per batch of postings (terms are
    keyed hashes).

    Raises:
        StoreUnavailable: the write failed.
    """
    tx.execute(
        _Q["insert_document"],
        [scope_ref, record_id, json.dumps(dict(field_lengths), sort_keys=True), valid_t_end],
    )
    for batch in postings:
        insert_postings(tx, scope_ref, record_id, batch)
    tx.note_index_change(
        DocumentIndexed(scope_ref, record_id, dict(field_lengths), tuple(postings))
    )


def insert_postings(tx: Transaction, scope_ref: str, record_id: str, batch: PostingBatch) -> None:
    """One batch of a record's postings in one statement (its document row is written first).

    Raises:
        StoreUnavailable: the write failed.
    """
    if batch.count:
        tx.execute(
            _Q["insert_postings"], [scope_ref, batch.terms, record_id, batch.fields, batch.counts]
        )


def purge_document(tx: Transaction, scope_ref: str, record_id: str) -> None:
    # The kept semantic vector is content too: it goes with the document, in this transaction.
    tx.execute(_Q["delete_vector"], [record_id, scope_ref])
    tx.execute(_Q["delete_postings"], [scope_ref, record_id])
    tx.execute(_Q["delete_document"], [scope_ref, record_id])
    tx.note_index_change(DocumentPurged(scope_ref, record_id))


def eligible_documents(
    tx: Transaction, scope_ref: str, *, system_as_of: int, valid_as_of: int, now_ms: int
) -> list[IndexedDocument]:
    rows = tx.fetchall(
        _Q["eligible_documents"],
        [scope_ref, system_as_of, system_as_of, valid_as_of, valid_as_of, now_ms],
    )
    return [
        IndexedDocument(str(r[0]), json.loads(r[1]), None if r[2] is None else int(r[2]))
        for r in rows
    ]


def postings_for_terms(tx: Transaction, scope_ref: str, terms: Sequence[str]) -> list[Posting]:
    if not terms:
        return []
    rows = tx.fetchall(_Q["postings_for_terms"], [scope_ref, list(terms)])
    return [Posting(str(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]


# -- idempotency and confirmations ---------------------------------------------------------


def _idempotency_identity(scope_ref: str, principal_ref: str, key_digest: str) -> str:
    return "\0".join(("idempotency", scope_ref, principal_ref, key_digest))


def get_idempotency(
    tx: Transaction,
    scope_ref: str,
    principal_ref: str,
    key_digest: str,
    *,
    absent_at: int | None = None,
) -> IdempotencyRow | None:
    """The stored result of (scope, principal, key), or None.

    `absent_at` is the generation of a snapshot that already found no row: the row is read
    again only if a commit since then wrote this key (store/published.py), so a write
    transaction re-checks a race without repeating the lookup when there was none.
    """
    identity = _idempotency_identity(scope_ref, principal_ref, key_digest)
    if absent_at is not None and not tx.written_since(identity, absent_at):
        return None
    for row in tx.fetchall(_Q["get_idempotency"], [key_digest]):
        # Keyed by the indexed digest alone (see `_in_scope`); the rest of the key is here.
        if row[4] == scope_ref and row[5] == principal_ref:
            return IdempotencyRow(*(str(v) for v in row[:4]))
    return None


def put_idempotency(
    tx: Transaction,
    scope_ref: str,
    principal_ref: str,
    key_digest: str,
    *,
    tool: str,
    operation_digest: str,
    result_json: str,
    now_ms: int,
) -> None:
    tx.execute(
        _Q["put_idempotency"],
        [scope_ref, principal_ref, key_digest, tool, operation_digest, result_json, now_ms],
    )
    tx.wrote_key(_idempotency_identity(scope_ref, principal_ref, key_digest))


def confirmation_used(tx: Transaction, jti: str, *, unused_at: int | None = None) -> bool:
    """True once the confirmation `jti` was consumed; `unused_at` as `absent_at` above."""
    if unused_at is not None and not tx.written_since("confirmation\0" + jti, unused_at):
        return False
    row = tx.fetchone(_Q["confirmation_used"], [jti])
    return bool(row and row[0])


def consume_confirmation(tx: Transaction, jti: str, scope_ref: str, tool: str, now_ms: int) -> None:
    """Consume confirmation `jti`, found unused in this transaction (`confirmation_used`)."""
    tx.execute(_Q["consume_confirmation"], [jti, scope_ref, tool, now_ms])
    tx.wrote_key("confirmation\0" + jti)
