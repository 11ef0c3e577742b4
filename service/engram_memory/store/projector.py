"""The background projector: DuckDB follows the call log while the writer is idle.

Phase 1 of issue 20 projected the log's pending records inside the next writing transaction,
so a mutation paid for the reads before it (about 10 ms for `forget` after a `get` and a
`search`). This thread takes that work off the callers' path: woken by each append, it
waits until the store has been idle for `idle_s` (no append, no transaction and no read
snapshot began meanwhile: a call in flight is left alone, since its append would wait for
the writer's lock) or the pending records reach half their bound (so a steady stream of
reads is still projected in large batches, one transaction each), then takes the writer's
lock and projects everything pending in one transaction
(`CallLogWriting.project_in_background`). A writing transaction that begins while records
are still pending projects them itself, as before, so the chain order in the file is always
the log's; an append that finds the bound reached projects on its own path too.

Crash safety is the projection's own (store/projection.py): the position moves in the same
transaction as the records, the log releases segments only after that COMMIT. A failed
projection leaves the records pending; the next wake, transaction or close retries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from engram_memory.contract.exceptions import StoreCorrupt, StoreUnavailable

log = logging.getLogger("engram_memory.store")

# How long the store must be idle before the projector takes the writer: longer than the gap
# between the reads and the append of one call, and than between back-to-back calls of one
# client, short against the time between an agent's calls.
DEFAULT_IDLE_S = 0.005


class BackgroundProjector:
    """One daemon thread running `project` (which projects what is pending, if anything)."""

    def __init__(
        self,
        project: Callable[[], None],
        half_full: Callable[[], bool],
        *,
        idle_s: float = DEFAULT_IDLE_S,
    ) -> None:
        self._project = project
        self._half_full = half_full
        self._idle_s = idle_s
        self._state = threading.Condition()
        self._woken = False
        self._last_activity = 0.0
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name="engram-call-log-projector", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def appended(self) -> None:
        """A record was appended: project it once the store is idle."""
        with self._state:
            self._woken = True
            self._last_activity = time.monotonic()
            self._state.notify()

    def active(self) -> None:
        """A transaction or read snapshot begins: the store is not idle."""
        self._last_activity = time.monotonic()  # one float: the idle wait re-reads it

    def stop(self) -> None:
        """Let a projection under way finish, then end the thread (the caller projects what
        is left, under the writer's lock). Idempotent."""
        with self._state:
            self._stopping = True
            self._state.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while self._wait_for_idle():
            try:
                self._project()
            except StoreCorrupt:
                return  # the store stopped itself (logged once); nothing may be written
            except StoreUnavailable:
                # Acknowledged already: the records stay pending; the next transaction, wake
                # or close projects them.
                log.warning("store: projecting the call log in the background failed")

    def _wait_for_idle(self) -> bool:
        """Wait until woken and the store idle (or half the bound is pending); False once
        stopping."""
        with self._state:
            while not self._stopping:
                if self._woken:
                    quiet = time.monotonic() - self._last_activity
                    if quiet >= self._idle_s or self._half_full():
                        self._woken = False
                        return True
                    self._state.wait(self._idle_s - quiet)
                else:
                    self._state.wait()
            return False
