"""Read-only views of the store for key rotation and backups: item ids and chain heads.

Nothing here reads content; item ids and scope refs are what key file names are derived from,
and chain heads are what an auditor pins.
"""

from __future__ import annotations

from engram_memory.contract.canonical import JsonValue
from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "inventory.sql")


def item_refs(tx: Transaction) -> list[tuple[str, str]]:
    """(scope_ref, item id) of every candidate and record, the items that have key files."""
    return [(str(scope), str(item)) for scope, item in tx.fetchall(_Q["item_refs"])]


def live_item_refs(tx: Transaction) -> list[tuple[str, str]]:
    """(scope_ref, item id) of every item whose key must still exist: pending candidates
    and records that keep a sealed body."""
    return [(str(scope), str(item)) for scope, item in tx.fetchall(_Q["live_item_refs"])]


def scopes(tx: Transaction) -> list[str]:
    """Every scope with a journal event, a candidate or a record."""
    return [str(row[0]) for row in tx.fetchall(_Q["scopes"])]


def chain_heads(tx: Transaction) -> dict[str, JsonValue]:
    """{"audit_head": {sequence, entry_hash} | None, "journal_heads": {scope: {cursor,
    event_hash}}}, in the form of the auditor export's manifest."""
    head = tx.fetchone(_Q["audit_head"])
    journal_heads: dict[str, JsonValue] = {
        str(scope): {"cursor": str(cursor), "event_hash": str(event_hash)}
        for scope, cursor, event_hash in tx.fetchall(_Q["journal_heads"])
    }
    return {
        "audit_head": None
        if head is None
        else {"sequence": int(head[0]), "entry_hash": str(head[1])},
        "journal_heads": journal_heads,
    }
