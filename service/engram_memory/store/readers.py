"""Read snapshots that never wait for the writer: a pool of DuckDB cursors of the one connection.

DuckDB gives every cursor (`connection.cursor()`) of a connection its own transaction with
MVCC, so a read-only call can run its snapshot on a cursor of its own while the single writer
holds the write lock. A cursor serves one thread at a time, hence the pool. Operations that
replace or close the connection (compaction, close) first drain the readers and drop the pool:
`exclusive()` waits for running snapshots to end and holds new ones back meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import duckdb


class ReaderPool:
    """Idle cursors of the current connection, and the gate that drains them."""

    def __init__(self, connection: Callable[[], duckdb.DuckDBPyConnection]) -> None:
        # A callable, not the object: compaction replaces the connection.
        self._connection = connection
        self._idle: list[duckdb.DuckDBPyConnection] = []
        self._state = threading.Condition()
        self._active = 0
        self._draining = False

    def acquire(self) -> duckdb.DuckDBPyConnection:
        """A cursor for one snapshot, waiting only while the connection is being replaced;
        hand it back with `release`.

        Raises:
            duckdb.Error: a new cursor could not be opened (the caller maps it).
        """
        with self._state:
            self._state.wait_for(lambda: not self._draining)
            self._active += 1
            cursor = self._idle.pop() if self._idle else None
        if cursor is not None:
            return cursor
        try:
            return self._connection().cursor()
        except BaseException:
            self.release(None)
            raise

    def release(self, cursor: duckdb.DuckDBPyConnection | None) -> None:
        """End a snapshot's use of `cursor` (None when acquiring it failed)."""
        with self._state:
            self._active -= 1
            if cursor is not None:
                self._idle.append(cursor)
            self._state.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """No snapshot runs inside this block; idle cursors are closed on entry."""
        with self._state:
            self._state.wait_for(lambda: not self._draining)
            self._draining = True
            self._state.wait_for(lambda: self._active == 0)
            idle, self._idle = self._idle, []
        try:
            for cursor in idle:
                with suppress(duckdb.Error):
                    cursor.close()
            yield
        finally:
            with self._state:
                self._draining = False
                self._state.notify_all()
