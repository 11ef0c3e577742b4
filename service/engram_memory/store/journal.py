"""Per-scope hash-chained journal with dense decimal cursors (SPEC §9.5).

Cursors are allocated per scope, so a cursor never reveals another scope's activity. Each
event links the previous event's hash; `verify_scope` re-derives the whole chain.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from engram_memory.contract.canonical import JsonValue, canonical_text
from engram_memory.contract.digests import ZERO_DIGEST, digest
from engram_memory.contract.exceptions import JournalCorrupt, JournalIntentConflict
from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "journal.sql")


@dataclass(frozen=True)
class JournalEvent:
    cursor: int
    event_id: str
    event_hash: str
    body: dict[str, JsonValue]

    @property
    def cursor_text(self) -> str:
        return str(self.cursor)


def _intent_digest(body: Mapping[str, JsonValue]) -> str:
    # The intent is what the event does, not when or under which chain position it landed.
    core = {k: body[k] for k in ("event_id", "operation", "target_id", "digests") if k in body}
    return digest("memory-journal-intent", core, field="event_hash")


def head(tx: Transaction, scope_ref: str) -> tuple[int, str]:
    """(high-water cursor, its hash); (0, zero hash) for an empty journal.

    Served from the writer's head cache (store/heads.py), not by a query.
    """
    return tx.journal_head(scope_ref)


def append(
    tx: Transaction,
    scope_ref: str,
    *,
    event_id: str,
    operation: str,
    target_id: str,
    fields: Mapping[str, JsonValue],
    unique: bool = False,
) -> JournalEvent:
    """Append one event at the next cursor of `scope_ref` (its head comes from the writer's
    head cache, not a query).

    An existing event of the same id and intent is returned instead (an idempotent append).
    `unique` says the caller's own checks in this transaction rule such an event out (the
    state it read allows the transition only once), so no lookup is spent on it; the store's
    UNIQUE (scope_ref, event_id) still refuses a duplicate, failing the transaction.

    Raises:
        JournalIntentConflict: `event_id` exists with another intent.
        StoreUnavailable: the write failed.
    """
    body: dict[str, JsonValue] = {
        **fields,
        "scope_ref": scope_ref,
        "event_id": event_id,
        "operation": operation,
        "target_id": target_id,
    }
    # By the indexed event id alone; an event of another scope is not this one.
    existing = (
        None
        if unique
        else next(
            (row for row in tx.fetchall(_Q["by_event_id"], [event_id]) if row[4] == scope_ref), None
        )
    )
    if existing is not None:
        if existing[3] != _intent_digest(body):
            raise JournalIntentConflict(event_id)
        return JournalEvent(int(existing[0]), event_id, str(existing[2]), json.loads(existing[1]))
    cursor, previous_hash = head(tx, scope_ref)
    body["cursor"] = str(cursor + 1)
    body["previous_event_hash"] = previous_hash
    event_hash = digest("memory-journal-event", body, field="event_hash")
    tx.execute(
        _Q["insert"],
        [
            scope_ref,
            cursor + 1,
            event_id,
            operation,
            target_id,
            canonical_text(body),
            previous_hash,
            event_hash,
            _intent_digest(body),
        ],
    )
    tx.moved_journal_head(scope_ref, (cursor + 1, event_hash))
    return JournalEvent(cursor + 1, event_id, event_hash, body)


def verify_scope(tx: Transaction, scope_ref: str) -> int:
    """Re-derive every link and hash of one scope's journal; return its length.

    Raises:
        JournalCorrupt: a gap, a broken link, a wrong hash or a malformed event.
    """
    expected_previous, expected_cursor = ZERO_DIGEST, 1
    for cursor, event_id, event_json, previous_hash, event_hash in tx.fetchall(
        _Q["scan"], [scope_ref]
    ):
        if int(cursor) != expected_cursor:
            raise JournalCorrupt(f"gap at cursor {expected_cursor}")
        try:
            body = json.loads(event_json)
        except ValueError as exc:
            raise JournalCorrupt(f"malformed event at cursor {cursor}") from exc
        if (
            previous_hash != expected_previous
            or body.get("previous_event_hash") != previous_hash
            or body.get("cursor") != str(cursor)
            or body.get("event_id") != event_id
            or digest("memory-journal-event", body, field="event_hash") != event_hash
        ):
            raise JournalCorrupt(f"broken chain at cursor {cursor}")
        expected_previous, expected_cursor = event_hash, expected_cursor + 1
    return expected_cursor - 1


def scopes(tx: Transaction) -> list[str]:
    return [str(row[0]) for row in tx.fetchall(_Q["scopes"])]


def events_for(tx: Transaction, scope_ref: str, target_id: str) -> list[JsonValue]:
    """The events of one candidate or record in this scope, across acceptance, in order."""
    rows = tx.fetchall(
        _Q["events_for"], [target_id, scope_ref, target_id, scope_ref, target_id, scope_ref]
    )
    return [{**json.loads(row[1]), "event_hash": str(row[2])} for row in rows]
