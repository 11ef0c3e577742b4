"""Durable key-destruction intents, and which items still need their key files.

A transition that ends an item's content (withdraw, reject, accept of a candidate, tombstone of
a record) promises the destruction of the item's key in the transaction that commits it
(`promise`). The key file is destroyed after COMMIT and only then is the promise `clear`ed, so
a crash in between leaves a promise the next start or a replay keeps. Every function runs in
the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from engram_memory.store.connection import load_queries
from engram_memory.store.forgotten import ContentDigests
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "key_intents.sql")


class ItemKey(NamedTuple):
    """An item that has (or had) a key file, and whether its content still needs it."""

    scope_ref: str
    item_id: str
    live: bool


def promise(
    tx: Transaction, scope_ref: str, item_ids: Iterable[str], operation: str, now_ms: int
) -> None:
    """Record that the keys of `item_ids` must be destroyed once `tx` commits.

    Every item must be without a pending promise (`source_of_record` tells for a record's
    source candidate); a second promise of an item fails the transaction.
    """
    items = list(dict.fromkeys(item_ids))
    if items:
        rows = ", ".join(["(?, ?, ?, ?)"] * len(items))
        params = [value for item in items for value in (scope_ref, item, operation, now_ms)]
        tx.execute(_Q["promise"].rstrip(";") + " " + rows, params)


def pending(tx: Transaction) -> list[tuple[str, str]]:
    """(scope_ref, item_id) of every destruction promised and not yet carried out."""
    return [(str(scope), str(item)) for scope, item in tx.fetchall(_Q["pending"])]


def pending_in_scope(tx: Transaction, scope_ref: str, item_ids: Sequence[str]) -> set[str]:
    """Which of `item_ids` still have a destruction promised in `scope_ref`."""
    if not item_ids:
        return set()
    rows = tx.fetchall(_Q["pending_in_scope"], [scope_ref, list(item_ids)])
    return {str(row[0]) for row in rows}


def clear(tx: Transaction, done: Iterable[tuple[str, str]]) -> None:
    """Forget the promises of (scope_ref, item_id) pairs whose key files are gone."""
    by_scope: dict[str, list[str]] = {}
    for scope, item in done:
        by_scope.setdefault(scope, []).append(item)
    for scope, items in by_scope.items():
        tx.execute(_Q["clear"], [scope, items])


def end_candidate(
    tx: Transaction,
    scope_ref: str,
    candidate_id: str,
    state: str,
    now_ms: int,
    keyed: ContentDigests | None = None,
) -> None:
    """End a candidate's content in one statement: its new `state`, its sealed body dropped
    (so only the record, if any, holds the content) and, with `keyed`, only keyed forms of
    its digests kept (a withdrawn candidate, core/forgotten.py).

    The only statement that changes a candidate's state: it notes the candidate's key
    (`candidate_key`), so a write transaction may trust a snapshot's read of the state unless
    a commit since wrote it (store/published.py)."""
    if keyed is None:
        tx.execute(_Q["end_candidate"], [state, now_ms, scope_ref, candidate_id])
    else:
        tx.execute(
            _Q["end_candidate_keyed"],
            [state, now_ms, keyed.payload, keyed.guard, keyed.record, scope_ref, candidate_id],
        )
    tx.wrote_key(candidate_key(scope_ref, candidate_id))


def candidate_key(scope_ref: str, candidate_id: str) -> str:
    """The key `end_candidate` notes when it changes the candidate's state."""
    return f"candidate\0{scope_ref}\0{candidate_id}"


def source_of_record(tx: Transaction, scope_ref: str, record_id: str) -> tuple[str, bool] | None:
    """(the candidate a record was promoted from, whether that candidate's key destruction is
    still promised), or None for a record without one."""
    row = tx.fetchone(_Q["source_of_record"], [scope_ref, record_id])
    return None if row is None or row[0] is None else (str(row[0]), bool(row[1]))


def has_row(tx: Transaction, scope_ref: str, item_id: str) -> bool:
    """True when a committed candidate or record of this id exists (it owns the key file)."""
    row = tx.fetchone(_Q["item_rows"], [scope_ref, item_id, scope_ref, item_id])
    return bool(row and row[0])


def item_keys(tx: Transaction) -> list[ItemKey]:
    """Every candidate and record, with whether its content still needs its key file."""
    return [ItemKey(str(s), str(i), bool(live)) for s, i, live in tx.fetchall(_Q["item_keys"])]


def item_key_names(tx: Transaction) -> tuple[set[str], set[str]]:
    """The key file names of `item_keys`: (those still needed, those of ended items)."""
    columns = tx.fetch_columns(_Q["item_key_names"])
    names, live = columns["name"], columns["live"].astype(bool)
    return set(names[live].tolist()), set(names[~live].tolist())
