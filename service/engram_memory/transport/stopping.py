"""Graceful stop: stop accepting calls, let the ones in flight answer (bounded), then close.

SIGTERM or SIGINT begins a stop. Every transport (MCP over stdio or streamable HTTP in
mcp_server.py, the maintenance channel in admin/channel.py) admits its calls through the one
`GracefulStop` of the process; once a stop begins they accept nothing new, and the server
waits up to `drain_seconds` (default 10, `--drain-seconds` / ENGRAM_DRAIN_SECONDS) for the
admitted calls to answer. Then it closes the store (checkpointing the WAL into the file),
removes the maintenance socket and exits 0.

Calls still running when the bound passes are abandoned: their cancellation is set, so a call
that has not committed stops at its last check before commit with CANCELLED and writes
nothing, and one already inside its commit finishes it (closing the store waits for the
transaction). A second signal abandons at once. Nothing here imports the rest of the package.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("engram_memory.transport.stopping")

DEFAULT_DRAIN_SECONDS = 10.0


class GracefulStop:
    """The calls in flight of one server process, and whether it is stopping (thread-safe)."""

    def __init__(self, drain_seconds: float = DEFAULT_DRAIN_SECONDS) -> None:
        self.drain_seconds = drain_seconds
        # Re-entrant: `request` may run in a signal handler on a thread that holds the lock.
        self._condition = threading.Condition(threading.RLock())
        self._in_flight: set[object] = set()
        self._cancellations: set[threading.Event] = set()
        self._deadline: float | None = None
        self._abandoned = False
        self._on_begin: list[Callable[[], None]] = []

    # -- the stop --------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        with self._condition:
            return self._deadline is not None

    def on_begin(self, callback: Callable[[], None]) -> None:
        """Run `callback` when the stop begins (e.g. to release a test-only pause)."""
        with self._condition:
            self._on_begin.append(callback)

    def request(self) -> None:
        """A stop signal: the first begins the stop, any further one abandons the drain."""
        if self.stopping:
            self.abandon()
        else:
            self.begin()

    def begin(self) -> None:
        """Accept nothing new from now on; the drain bound starts now (idempotent)."""
        with self._condition:
            if self._deadline is not None:
                return
            self._deadline = time.monotonic() + self.drain_seconds
            callbacks = list(self._on_begin)
            self._condition.notify_all()
        for callback in callbacks:
            callback()

    @property
    def drained(self) -> bool:
        """True once nothing admitted is still in flight (or the drain was abandoned)."""
        with self._condition:
            return self._abandoned or not self._in_flight

    @property
    def deadline_passed(self) -> bool:
        with self._condition:
            return self._deadline is not None and time.monotonic() >= self._deadline

    @property
    def in_flight(self) -> int:
        with self._condition:
            return len(self._in_flight)

    def wait_drained(self) -> bool:
        """Block until drained or the bound passes (then abandon); True if it drained."""
        with self._condition:
            while not self._abandoned and self._in_flight:
                remaining = (self._deadline or time.monotonic()) - time.monotonic()
                if self._deadline is not None and remaining <= 0:
                    break
                self._condition.wait(remaining if self._deadline is not None else None)
            drained = not self._in_flight
        if not drained:
            self.abandon()
        return drained

    def abandon(self) -> None:
        """Stop waiting: cancel every call still in flight (they write nothing more)."""
        with self._condition:
            if self._abandoned:
                return
            self._abandoned = True
            left = len(self._in_flight)
            cancellations = list(self._cancellations)
            self._condition.notify_all()
        for cancellation in cancellations:
            cancellation.set()
        if left:
            log.warning("stop: abandoned %d call(s) still in flight", left)

    # -- calls -----------------------------------------------------------------------------

    def admit(self, call: object) -> bool:
        """Count `call` in flight unless a stop has begun; False means refuse it."""
        with self._condition:
            if self._deadline is not None:
                return False
            self._in_flight.add(call)
            return True

    def enter(self, call: object) -> None:
        """Count `call` in flight even while stopping (a request already read must answer)."""
        with self._condition:
            self._in_flight.add(call)

    def leave(self, call: object) -> None:
        """`call` answered (or will never answer); unknown calls are ignored."""
        with self._condition:
            self._in_flight.discard(call)
            if not self._in_flight:
                self._condition.notify_all()

    @contextmanager
    def cancellable(self, cancellation: threading.Event) -> Iterator[None]:
        """Register a call's cancellation so an abandoned drain can set it."""
        with self._condition:
            if self._abandoned:
                cancellation.set()
            self._cancellations.add(cancellation)
        try:
            yield
        finally:
            with self._condition:
                self._cancellations.discard(cancellation)
