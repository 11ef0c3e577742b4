"""The DuckDB file beneath the store: its name, its named statements, a configured connection.

The lowest module of store/: `Transaction` (transaction.py), the migrations, compaction and
`Database` build on it, and it imports none of them.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import duckdb

DATABASE_FILE = "engram.duckdb"
COMPACT_SUFFIX = ".compacting"  # store/compaction.py: the fresh copy, then the old file
RETIRED_SUFFIX = ".retired"
_QUERY_MARKER = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str) -> dict[str, str]:
    """Named statements from a `.sql` file (`-- name: x` precedes each statement)."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _QUERY_MARKER.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def connect(path: Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection to the store file, configured for the service.

    One execution thread per statement: the service runs short point statements from many
    calls at once, where DuckDB's intra-query workers only add hand-offs (measured ~15-20 %
    more time per call on 2 cores); concurrent calls still run on their own threads.

    Raises:
        duckdb.Error: the file cannot be opened or the setting was refused.
    """
    connection = duckdb.connect(str(path), read_only=read_only)
    connection.execute("SET threads = 1")
    return connection
