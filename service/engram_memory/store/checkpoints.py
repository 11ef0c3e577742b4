"""Store access for signed checkpoints: the chain heads, the kept checkpoints (migration
0008), and the chain positions a checkpoint is compared with, in the store or in an export.

Signing and verifying are core/checkpoints.py's; this module only reads and writes rows.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "checkpoints.sql")

Head = tuple[int, str]  # (sequence or cursor, entry or event hash)


def audit_head(tx: Transaction) -> Head | None:
    """The last audit entry's (sequence, entry hash); None for an empty trail."""
    row = tx.fetchone(_Q["audit_head"])
    return None if row is None else (int(row[0]), str(row[1]))


def journal_heads(tx: Transaction) -> dict[str, Head]:
    """Every scope's last journal (cursor, event hash), by scope reference."""
    return {str(s): (int(c), str(h)) for s, c, h in tx.fetchall(_Q["journal_heads"])}


def insert(
    tx: Transaction, signed_at: str, audit_sequence: int, key_id: str, reason: str, text: str
) -> None:
    """Keep one signed checkpoint document (`text`, exactly as signed).

    Raises:
        StoreUnavailable: the write failed.
    """
    tx.execute(_Q["insert"], [signed_at, audit_sequence, key_id, reason, text])


def stored_documents(tx: Transaction) -> list[str]:
    """Every kept checkpoint document, oldest audit head first (unverified)."""
    return [str(row[0]) for row in tx.fetchall(_Q["stored"])]


def latest_documents(tx: Transaction, key_id: str, limit: int) -> list[str]:
    """The newest `limit` kept checkpoint documents of `key_id`, newest audit head first
    (unverified)."""
    return [str(row[0]) for row in tx.fetchall(_Q["latest_by_key"], [key_id, limit])]


def entry_hash_at(tx: Transaction, sequence: int) -> str | None:
    row = tx.fetchone(_Q["entry_hash_at"], [sequence])
    return None if row is None else str(row[0])


def last_sequence(tx: Transaction) -> int:
    row = tx.fetchone(_Q["last_sequence"])
    return 0 if row is None else int(row[0])


def entry_hashes(tx: Transaction, low: int, high: int) -> dict[int, str]:
    """Entry hashes by sequence, for `low` <= sequence <= `high`."""
    return {int(s): str(h) for s, h in tx.fetchall(_Q["entry_hashes_between"], [low, high])}


def entry_hashes_at(tx: Transaction, sequences: list[int]) -> dict[int, str]:
    """Entry hashes by sequence, of those `sequences` that exist."""
    return {int(s): str(h) for s, h in tx.fetchall(_Q["entry_hashes_at"], [sequences])}


def event_hashes_at(tx: Transaction, scope_ref: str, cursors: list[int]) -> dict[int, str]:
    """One scope's event hashes by cursor, of those `cursors` that exist."""
    rows = tx.fetchall(_Q["event_hashes_at"], [scope_ref, cursors])
    return {int(c): str(h) for c, h in rows}


def event_hash_at(tx: Transaction, scope_ref: str, cursor: int) -> str | None:
    row = tx.fetchone(_Q["event_hash_at"], [scope_ref, cursor])
    return None if row is None else str(row[0])


def last_cursor(tx: Transaction, scope_ref: str) -> int:
    row = tx.fetchone(_Q["last_cursor"], [scope_ref])
    return 0 if row is None else int(row[0])


def event_hashes(tx: Transaction, scope_ref: str, low: int, high: int) -> dict[int, str]:
    """One scope's event hashes by cursor, for `low` <= cursor <= `high`."""
    rows = tx.fetchall(_Q["event_hashes_between"], [scope_ref, low, high])
    return {int(c): str(h) for c, h in rows}


def exported_entry_hashes(parquet: Path, low: int, high: int) -> dict[int, str]:
    """Entry hashes by sequence from an export's audit_entries.parquet.

    Raises:
        duckdb.Error: the file is not a readable export of that table.
    """
    return _read_pairs(
        "SELECT sequence, entry_hash FROM read_parquet(?) WHERE sequence BETWEEN ? AND ?",
        [str(parquet), low, high],
    )


def exported_event_hashes(parquet: Path, scope_ref: str, low: int, high: int) -> dict[int, str]:
    """One scope's event hashes by cursor from an export's journal_events.parquet.

    Raises:
        duckdb.Error: the file is not a readable export of that table.
    """
    return _read_pairs(
        "SELECT cursor, event_hash FROM read_parquet(?) "
        "WHERE scope_ref = ? AND cursor BETWEEN ? AND ?",
        [str(parquet), scope_ref, low, high],
    )


def _read_pairs(sql: str, params: list[object]) -> dict[int, str]:
    # An in-memory connection of its own: an export is not the store.
    with duckdb.connect() as connection:
        rows = connection.execute(sql, params).fetchall()
    return {int(position): str(value) for position, value in rows}
