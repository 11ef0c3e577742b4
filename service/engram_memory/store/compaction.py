"""Store compaction: copy the live rows into a fresh file, swap it in, shred the old one.

DuckDB leaves deleted rows' bytes in freed blocks; only a copy leaves them behind. The swap
is crash-safe: the store file is at every moment either the old or the complete new one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import duckdb

from engram_memory._internal.durable_files import fsync_directory, fsync_path, shred
from engram_memory._internal.private_files import make_private
from engram_memory.contract.exceptions import StoreUnavailable
from engram_memory.store.connection import COMPACT_SUFFIX, RETIRED_SUFFIX


def compact_store(
    connection: duckdb.DuckDBPyConnection,
    path: Path,
    driver_failure: Callable[[duckdb.Error, str], StoreUnavailable],
    *,
    reconnect: Callable[[], None],
) -> tuple[int, int]:
    """The body of `Database.compact` (the caller holds the database lock): copy, close
    `connection`, swap, `reconnect` (the store opens the new file), shred the old one.

    Raises:
        StoreUnavailable: the copy or the swap failed (the old file still serves).
    """
    fresh = path.with_name(path.name + COMPACT_SUFFIX)
    retired = path.with_name(path.name + RETIRED_SUFFIX)
    for leftover in (fresh, retired, fresh.with_name(fresh.name + ".wal")):
        if not shred(leftover):
            raise StoreUnavailable("cannot remove a leftover of an earlier compaction")
    before = path.stat().st_size
    try:
        connection.execute("CHECKPOINT")
        row = connection.execute("SELECT current_database()").fetchone()
        source = str(row[0]) if row else ""
        target = str(fresh).replace("'", "''")
        connection.execute(f"ATTACH '{target}' AS engram_compacted")
        connection.execute(f'COPY FROM DATABASE "{source}" TO engram_compacted')
        connection.execute("DETACH engram_compacted")
    except duckdb.Error as exc:
        with suppress(duckdb.Error):
            connection.execute("DETACH DATABASE IF EXISTS engram_compacted")
        shred(fresh)
        raise driver_failure(exc, "compaction copy failed") from exc
    try:
        connection.close()
        make_private(fresh)  # DuckDB created it under the process umask; it becomes the store
        fsync_path(fresh)
        # Keep the old inode reachable under another name so it can be overwritten once
        # the new file is in place; the rename itself is atomic.
        os.link(path, retired)
        os.replace(fresh, path)
        fsync_directory(path.parent)
    except (duckdb.Error, OSError) as exc:
        reconnect()
        raise StoreUnavailable("compaction swap failed") from exc
    reconnect()
    if not shred(retired):
        raise StoreUnavailable("the old store file could not be shredded")
    return before, path.stat().st_size
