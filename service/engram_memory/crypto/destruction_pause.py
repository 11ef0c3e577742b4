"""Key destructions that a backup can hold back while it copies the keys of its snapshot.

A backup copies the store at one point in time and then the key files of the items live at
that point. A key destroyed between the two would be missing from the archive (a live item
that no longer opens after restore); so destructions run shared and a backup's key copy
runs exclusive. Keys destroyed after the copy are in the archive: they were live at its
snapshot point (docs/operators/backup.md: backups and crypto-shredding).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class DestructionPause:
    """Many destructions at a time, or one pause; a pause waits for running destructions
    and holds new ones back until it ends (in-process: one server holds the key store)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._destroying = 0
        self._paused = False

    @contextmanager
    def destroying(self) -> Iterator[None]:
        with self._condition:
            self._condition.wait_for(lambda: not self._paused)
            self._destroying += 1
        try:
            yield
        finally:
            with self._condition:
                self._destroying -= 1
                self._condition.notify_all()

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._condition:
            self._condition.wait_for(lambda: not self._paused)
            self._paused = True
            self._condition.wait_for(lambda: self._destroying == 0)
        try:
            yield
        finally:
            with self._condition:
                self._paused = False
                self._condition.notify_all()
