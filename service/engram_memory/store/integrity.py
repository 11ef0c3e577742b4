"""Read the whole store, so that a damaged block anywhere fails verification.

DuckDB checks a block's checksum when it reads the block; the chains only touch the journal
and audit tables, so a flipped byte in any other table would go unnoticed until a call read
it. Reading every column of every row of every table makes DuckDB check them all.
"""

from __future__ import annotations

from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "integrity.sql")


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def read_every_row(tx: Transaction) -> tuple[int, int]:
    """Read every row of every table; return (tables, rows).

    Raises:
        StoreCorrupt: a block failed its checksum (the store is then stopped).
        StoreUnavailable: another read failure.
    """
    tables = tx.fetchall(_Q["tables"])
    # Identifiers come from DuckDB's own catalog and are quoted; nothing from a caller.
    rows = sum(
        tx.count_rows(f"SELECT * FROM {_quoted(str(schema))}.{_quoted(str(table))}")  # noqa: S608
        for schema, table in tables
    )
    return len(tables), rows
