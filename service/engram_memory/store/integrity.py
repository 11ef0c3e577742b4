"""Read the whole store, so that a damaged block anywhere fails verification.

DuckDB checks a block's checksum when it reads the block; the chains only touch the journal
and audit tables, so a flipped byte in any other table would go unnoticed until a call read
it. Reading every column of every row of every table makes DuckDB check them all.

The rows are read inside DuckDB (a hash of every column, folded per table), not fetched into
Python: the same blocks are read and checked, in ~2 s instead of ~40 s for a 100k-record
store (docs/operators/import.md). `serve` runs it after serving starts (core/integrity_scan.py);
`audit verify` runs it before its verdict.
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
    rows = 0
    for schema, table in tables:
        # Identifiers come from DuckDB's own catalog and are quoted; nothing from a caller.
        # `hash(COLUMNS(*))` needs every column of every row, so every block is read.
        counted = tx.fetchone(
            f"SELECT count(*), bit_xor(hash(COLUMNS(*))) "  # noqa: S608
            f"FROM {_quoted(str(schema))}.{_quoted(str(table))}"
        )
        rows += 0 if counted is None else int(counted[0])
    return len(tables), rows
