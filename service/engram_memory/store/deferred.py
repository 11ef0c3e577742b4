"""Housekeeping that rides on the next write transaction instead of paying for its own.

A write transaction costs a BEGIN, a COMMIT with its fsync and an anchor write; statements that
only tidy up after a commit (clearing key-destruction promises once the key files are gone) do
not need one of their own. They are queued here and run inside the next transaction that
writes, before its first write, so they never undo what that transaction writes (a clear queued
before a new promise of the same item runs before the promise is made). Only work that the next
start redoes may be deferred: a crash loses the queue, and a failed transaction puts its work
back for the one after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from engram_memory.store.transaction import Transaction

Work = Callable[[Transaction], None]


class DeferredWork:
    """A thread-safe queue of idempotent statements for the next write transaction."""

    def __init__(self) -> None:
        self._queue: list[Work] = []
        self._lock = threading.Lock()

    def add(self, work: Work) -> None:
        with self._lock:
            self._queue.append(work)

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue)

    def run_in(self, tx: Transaction) -> list[Work]:
        """Run every queued work in `tx`; returns what ran, for `restore` if `tx` fails."""
        with self._lock:
            taken, self._queue = self._queue, []
        try:
            for work in taken:
                work(tx)
        except BaseException:
            self.restore(taken)
            raise
        return taken

    def restore(self, works: list[Work]) -> None:
        """Put back the work of a transaction that did not commit."""
        if works:
            with self._lock:
                self._queue[:0] = works
