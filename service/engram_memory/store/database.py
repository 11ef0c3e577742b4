"""The DuckDB file: one writer process, numbered migrations, serialized transactions.

DuckDB allows one writing process per file, so the service holds the only connection and
serializes every transaction behind a lock. Every DuckDB exception is mapped here, at the one
boundary, to `StoreUnavailable`; nothing above this module sees driver text.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from engram_memory.contract.errors import EngramError
from engram_memory.durable_files import fsync_directory, shred

DATABASE_FILE = "engram.duckdb"
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_QUERY_MARKER = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)
log = logging.getLogger("engram_memory.store")


class StoreUnavailable(EngramError):
    """The store could not complete an operation; maps to STORE_UNAVAILABLE."""


class CommitOutcomeUnknown(StoreUnavailable):
    """COMMIT itself failed: the transaction may or may not be durable (MUTATION_OUTCOME_UNKNOWN).

    Any failure before COMMIT rolls back and is a definite STORE_UNAVAILABLE instead.
    """


class StoreVersionSkew(EngramError):
    """The file was written by a newer (or foreign) schema; the service refuses to start."""


def load_queries(package: str, filename: str) -> dict[str, str]:
    """Named statements from a `.sql` file (`-- name: x` precedes each statement)."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _QUERY_MARKER.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def _migrations() -> list[tuple[int, str, str]]:
    folder = resources.files("engram_memory.store").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


SCHEMA_VERSION = max(version for version, _, _ in _migrations())


class Database:
    """The single DuckDB connection of this process."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, path: Path) -> None:
        self._connection = connection
        self.path = path
        self._lock = threading.RLock()
        # Per worker thread: how many writing transactions this thread committed. A call runs
        # on one thread, so comparing before/after tells whether anything of it is durable.
        self._commits = threading.local()

    @classmethod
    def open(cls, data_dir: Path, *, read_only: bool = False) -> Database:
        """Open (creating and migrating if needed) the store in `data_dir`.

        Raises:
            StoreVersionSkew: the file is newer than this code or its ledger was altered.
            StoreUnavailable: the file cannot be opened (e.g. another writer holds it).
        """
        try:
            data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            connection = duckdb.connect(str(data_dir / DATABASE_FILE), read_only=read_only)
        except (duckdb.Error, OSError) as exc:
            raise StoreUnavailable("cannot open the store file") from exc
        database = cls(connection, data_dir / DATABASE_FILE)
        if not read_only:
            database._migrate()
        database._check_version()
        return database

    def close(self) -> None:
        """Fold the WAL into the file, then close: the next start replays nothing.

        A failed checkpoint is logged and the close goes on (the WAL stays and is replayed).
        """
        with self._lock:
            try:
                self._connection.execute("CHECKPOINT")  # a no-op on a read-only store
            except duckdb.Error:
                log.warning("store: checkpoint at close failed; the next start replays the WAL")
            self._connection.close()

    def _migrate(self) -> None:
        with self.transaction() as tx:
            tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, sha256 VARCHAR NOT NULL)"
            )
            applied = {row[0]: row[2] for row in tx.fetchall("SELECT * FROM schema_migrations")}
            for version, name, sql in _migrations():
                checksum = hashlib.sha256(sql.encode("utf-8")).hexdigest()
                if version in applied:
                    if applied[version] != checksum:
                        raise StoreVersionSkew(f"migration {name} differs from the applied one")
                    continue
                tx.execute(sql)
                tx.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?)", [version, name, checksum]
                )

    def _check_version(self) -> None:
        with self.transaction() as tx:
            row = tx.fetchone("SELECT max(version) FROM schema_migrations")
        if row is None or row[0] != SCHEMA_VERSION:
            raise StoreVersionSkew(
                f"store schema version {row[0] if row else None}, "
                f"this build expects {SCHEMA_VERSION}"
            )

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One serialized DuckDB transaction; commits on exit, rolls back on any exception.

        Raises:
            StoreUnavailable: begin or commit failed (the caller decides whether the outcome
                of a mutation is unknown).
        """
        with self._lock:
            try:
                self._connection.execute("BEGIN TRANSACTION")
            except duckdb.Error as exc:
                raise StoreUnavailable("begin failed") from exc
            tx = Transaction(self._connection)
            try:
                yield tx
            except BaseException:
                # The original failure is what matters, not a failed rollback.
                with suppress(duckdb.Error):
                    self._connection.execute("ROLLBACK")
                raise
            try:
                self._connection.execute("COMMIT")
            except duckdb.Error as exc:
                raise CommitOutcomeUnknown("commit failed") from exc
            if tx.wrote:
                self._commits.count = self.commits_on_this_thread() + 1

    def commits_on_this_thread(self) -> int:
        count: int = getattr(self._commits, "count", 0)
        return count

    @contextmanager
    def snapshot_copy(self, target: Path) -> Iterator[Transaction]:
        """A read transaction on its own cursor; when the block ends, the store as this
        transaction sees it is copied into a new DuckDB file `target` (store/snapshot.py).

        Writers go on meanwhile (MVCC): nothing they commit is seen or copied.

        Raises:
            StoreUnavailable: the snapshot or its copy failed (`target` is the caller's to
                shred).
        """
        from engram_memory.store.snapshot import copied_on_exit

        with self._lock:  # the connection is shared; a cursor of it is not
            cursor = self._connection.cursor()
        try:
            with copied_on_exit(cursor, target):
                yield Transaction(cursor)
        except duckdb.Error as exc:
            raise StoreUnavailable("snapshot copy failed") from exc
        finally:
            cursor.close()

    def compact(self) -> tuple[int, int]:
        """Rewrite the store into a fresh file of live rows only, then shred the old file.

        DuckDB leaves deleted rows' bytes in freed blocks (forgotten records' keyed term
        hashes among them); only a copy leaves them behind. Every transaction waits for the
        rewrite (they serialize on the same lock). The swap is crash-safe: the store file is
        at every moment either the old or the complete new one; leftovers of an interrupted
        run are shredded by the next. Returns (bytes before, bytes after).

        Raises:
            StoreUnavailable: the copy or the swap failed (the old file still serves).
        """
        with self._lock:
            return compact_store(self)

    def _reconnect(self) -> None:
        """Open the (new) store file again after `compact_store` closed the connection."""
        try:
            self._connection = duckdb.connect(str(self.path))
        except duckdb.Error as exc:
            raise StoreUnavailable("cannot reopen the store file") from exc

    def checkpoint(self) -> None:
        """Fold the WAL into the main file (used before copies and shredding checks)."""
        with self._lock:
            try:
                self._connection.execute("CHECKPOINT")
            except duckdb.Error as exc:
                raise StoreUnavailable("checkpoint failed") from exc


class Transaction:
    """Statement helpers bound to the open transaction; DuckDB errors become StoreUnavailable."""

    def __init__(self, connection: duckdb.DuckDBPyConnection) -> None:
        self._connection = connection
        # Statements go through execute/executemany; fetch* only read.
        self.wrote = False

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.wrote = True
        try:
            self._connection.execute(sql, list(params))
        except duckdb.Error as exc:
            raise StoreUnavailable("statement failed") from exc

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        self.wrote = True
        try:
            self._connection.executemany(sql, [list(row) for row in rows])
        except duckdb.Error as exc:
            raise StoreUnavailable("statement failed") from exc

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._connection.execute(sql, list(params)).fetchall()
        except duckdb.Error as exc:
            raise StoreUnavailable("query failed") from exc

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        try:
            return self._connection.execute(sql, list(params)).fetchone()
        except duckdb.Error as exc:
            raise StoreUnavailable("query failed") from exc


COMPACT_SUFFIX = ".compacting"
RETIRED_SUFFIX = ".retired"


def compact_store(database: Database) -> tuple[int, int]:
    """The body of `Database.compact` (the caller holds the database lock)."""
    path = database.path
    fresh = path.with_name(path.name + COMPACT_SUFFIX)
    retired = path.with_name(path.name + RETIRED_SUFFIX)
    for leftover in (fresh, retired, fresh.with_name(fresh.name + ".wal")):
        if not shred(leftover):
            raise StoreUnavailable("cannot remove a leftover of an earlier compaction")
    before = path.stat().st_size
    connection = database._connection
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
        raise StoreUnavailable("compaction copy failed") from exc
    try:
        connection.close()
        _fsync(fresh)
        # Keep the old inode reachable under another name so it can be overwritten once
        # the new file is in place; the rename itself is atomic.
        os.link(path, retired)
        os.replace(fresh, path)
        fsync_directory(path.parent)
    except (duckdb.Error, OSError) as exc:
        database._reconnect()
        raise StoreUnavailable("compaction swap failed") from exc
    database._reconnect()
    if not shred(retired):
        raise StoreUnavailable("the old store file could not be shredded")
    return before, path.stat().st_size


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
