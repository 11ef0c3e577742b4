"""A point-in-time copy of the store into a new DuckDB file, for backups (admin/backup.py).

The copy runs inside one read transaction of its own cursor, so it is exactly the store as
of that transaction's start: writers on the service's connection go on (MVCC) and nothing
they commit meanwhile is in it. Whatever the caller reads in the same transaction (chain
heads, live items) describes the same instant. The copy holds sealed bodies and keyed
hashes, never plaintext; the caller shreds it once archived.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import duckdb

from engram_memory._internal.private_files import make_private

_ALIAS = "engram_snapshot"


@contextmanager
def copied_on_exit(cursor: duckdb.DuckDBPyConnection, target: Path) -> Iterator[None]:
    """Begin a transaction on `cursor`; when the block ends, copy what it sees to `target`.

    Raises:
        duckdb.Error: attaching, copying or committing failed (Database maps it).
        OSError: the copy's mode cannot be made 0600.
    """
    quoted = str(target).replace("'", "''")
    cursor.execute(f"ATTACH '{quoted}' AS {_ALIAS}")
    try:
        make_private(target)  # a copy of the store: as private as the store
        cursor.execute("BEGIN TRANSACTION")
        try:
            yield
            row = cursor.execute("SELECT current_database()").fetchone()
            source = str(row[0]) if row else ""
            cursor.execute(f'COPY FROM DATABASE "{source}" TO {_ALIAS}')
            cursor.execute("COMMIT")
        except BaseException:
            with suppress(duckdb.Error):
                cursor.execute("ROLLBACK")
            raise
    finally:
        with suppress(duckdb.Error):
            cursor.execute(f"DETACH DATABASE IF EXISTS {_ALIAS}")
