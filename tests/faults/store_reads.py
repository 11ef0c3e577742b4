"""Reading a stopped server's store from a fault test: one count, read-only, left as found."""

from __future__ import annotations

from pathlib import Path

from engram_memory.store.database import Database


def count(data_dir: Path, sql: str) -> int:
    """The single number `sql` selects from the store in `data_dir` (no checkpoint on close)."""
    database = Database.open(data_dir, read_only=True)
    try:
        with database.reading() as tx:
            row = tx.fetchone(sql)
    finally:
        database.close(checkpoint=False)
    assert row is not None
    return int(row[0])
