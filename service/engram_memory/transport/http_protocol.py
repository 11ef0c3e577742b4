"""uvicorn's HTTP/1.1 protocol with the bounds it lacks: a cap on open connections (in all
and per client address), and a deadline for a request's headers and another for its body.

uvicorn times out only the idle gap between two requests (`timeout_keep_alive`): a client
that trickles its headers byte by byte, opens a connection and sends nothing, or never
finishes its body holds the connection (and a file descriptor) for ever. Here every request
must have its headers within `header_timeout_seconds` of its first byte (or of the
connection), and its whole body within `body_timeout_seconds` after them; otherwise the
connection is closed.

Connections come in two kinds for the caps: *pending* ones, which have not yet sent the
headers of a first request, and *serving* ones, which have. A new connection over
`max_connections`, or over `max_connections_per_peer` from one address, first takes the place
of the oldest pending connection (of that address, or of anyone for the server's cap) past
its grace (below), which is closed. A new connection still silent and over a cap when its own
grace ends is pushed out itself; it is refused as soon as it is made only when every
connection is serving (uvicorn's `limit_concurrency` would still accept it and hold it until
its request arrives, to answer 503). A slow-loris flood from the address a legitimate host
shares (every local client is 127.0.0.1) thus only closes its own connections: a host sends
its headers the moment it connects and is out of reach from then on, while the flood's
connections stay pending until the next ones push them out.

A new connection has `PROOF_GRACE_SECONDS` to send its headers before the caps can push it
out, so a host's connection made just before a burst of the flood's is not pushed out by them
before its headers were read; within their grace, connections may exceed `max_connections`
by `ACCEPT_HEADROOM`, and beyond that the oldest silent connection of any age makes room. A
host is then pushed out only by more than that many connections arriving between its connect
and its headers.

A client that drops its connection mid-request costs one log line, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from engram_memory.transport.http_settings import HttpSettings

log = logging.getLogger("engram_memory.http")

# A new connection is not pushed out by the caps before this: time to send its first
# request's headers, which a client does as soon as it is connected (a busy client may take
# a few milliseconds to get there; the flood's connections never do).
PROOF_GRACE_SECONDS = 0.1
# Connections within their grace may exceed `max_connections` by this much; beyond it the
# oldest silent connection of any age makes room: the hard bound on descriptors.
ACCEPT_HEADROOM = 128


class LogBudget:
    """At most `per_minute` lines of one kind a minute; the rest are counted and reported
    in one line when the next minute starts, so a flood cannot flood the log."""

    def __init__(self, per_minute: int = 20, clock: Any = time.monotonic) -> None:
        self._per_minute, self._clock = per_minute, clock
        self._window_start = clock()
        self._lines = 0
        self._suppressed = 0

    def warn(self, line: str) -> None:
        now = self._clock()
        if now - self._window_start >= 60:
            if self._suppressed:
                log.warning("%d more such lines suppressed in the last minute", self._suppressed)
            self._window_start, self._lines, self._suppressed = now, 0, 0
        if self._lines < self._per_minute:
            self._lines += 1
            log.warning("%s", line)
        else:
            self._suppressed += 1


def guarded_protocol(settings: HttpSettings) -> type[H11Protocol]:
    """The uvicorn protocol class that enforces `settings`' connection cap and timeouts."""
    budget = LogBudget()
    open_by_peer: Counter[str] = Counter()
    # Connections that have not sent a first request's headers, oldest first (dicts keep
    # insertion order): the ones a new connection may push out.
    pending: dict[GuardedH11Protocol, None] = {}

    class GuardedH11Protocol(H11Protocol):
        def __init__(
            self,
            config: Config,
            server_state: ServerState,
            app_state: dict[str, Any],
            _loop: asyncio.AbstractEventLoop | None = None,
        ) -> None:
            super().__init__(config, server_state, app_state, _loop)
            self._deadline: asyncio.TimerHandle | None = None
            self._awaiting = ""  # the part of the request the deadline is for
            self._counted = False  # in `open_by_peer`
            self._timed_out = False
            self._connected_at = 0.0

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._connected_at = self.loop.time()
            if open_by_peer.total() >= settings.max_connections + ACCEPT_HEADROOM and not (
                self._push_out(None, any_age=True)
            ):
                budget.warn(
                    f"refused a connection: {settings.max_connections} are open "
                    f"(ENGRAM_HTTP_MAX_CONNECTIONS) and {ACCEPT_HEADROOM} more are sending "
                    "their first request"
                )
                self.transport.close()
                return
            open_by_peer[self._peer()] += 1
            self._counted = True
            pending[self] = None
            self._arm(settings.header_timeout_seconds)
            self._keep_to_caps()  # room from silent connections past their grace, if any
            self.loop.call_later(PROOF_GRACE_SECONDS, self._grace_over)

        def _grace_over(self) -> None:
            if self._counted:
                self._keep_to_caps()  # this one included, if it is still silent

        def _keep_to_caps(self) -> None:
            """Push out the oldest silent connections past their grace while this one's
            address, or the server, is over its cap."""
            peer = self._peer()
            while open_by_peer[peer] > settings.max_connections_per_peer:
                if not self._push_out(peer):
                    break
            while open_by_peer.total() > settings.max_connections:
                if not self._push_out(None):
                    break

        def _push_out(self, peer: str | None, any_age: bool = False) -> bool:
            """Close the oldest silent connection (of `peer`, or of anyone; past its grace
            unless `any_age`) to make room; False when there is none."""
            now = self.loop.time()
            oldest = next(
                (
                    c
                    for c in pending
                    if peer in (None, c._peer())
                    and (any_age or now - c._connected_at >= PROOF_GRACE_SECONDS)
                ),
                None,
            )
            if oldest is None:
                return False
            budget.warn(
                f"closed a connection from {oldest._peer()} that had sent no request, "
                "to make room for another"
            )
            oldest._timed_out = True  # not "dropped before its request": we closed it
            oldest._uncount()
            oldest.transport.close()
            return True

        def _uncount(self) -> None:
            pending.pop(self, None)
            if self._counted:
                self._counted = False
                open_by_peer[self._peer()] -= 1
                if open_by_peer[self._peer()] <= 0:
                    del open_by_peer[self._peer()]

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow_request()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow_request()  # a pipelined request may have been read already

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._uncount()
            if not self._timed_out and self._request_incomplete():
                budget.warn(
                    f"connection from {self._peer()} dropped before its request was complete"
                )
            super().connection_lost(exc)

        def _request_incomplete(self) -> bool:
            state = self.conn.their_state
            if state is h11.SEND_BODY:
                return True
            return state is h11.IDLE and bool(self.conn.trailing_data[0])

        def _follow_request(self) -> None:
            """Re-arm the deadline for the part of the request now awaited."""
            state = self.conn.their_state
            if state is not h11.IDLE:
                pending.pop(self, None)  # a request's headers arrived: serving from now on
            if state is h11.IDLE:
                if self._deadline is None and self.conn.trailing_data[0]:
                    self._arm(settings.header_timeout_seconds)  # a request has begun
            elif state is h11.SEND_BODY:
                if self._awaiting != "body":
                    self._arm(settings.body_timeout_seconds, part="body")
            else:
                self._disarm()  # the request is complete (or the connection is closing)

        def _arm(self, seconds: float, part: str = "headers") -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expire, part, seconds)
            self._awaiting = part

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            self._awaiting = ""

        def _expire(self, part: str, seconds: float) -> None:
            self._deadline, self._awaiting = None, ""
            if self.transport.is_closing():
                return
            self._timed_out = True
            budget.warn(
                f"closed a connection from {self._peer()}: request {part} not received "
                f"within {seconds:g} s"
            )
            self.transport.close()

        def _peer(self) -> str:
            return self.client[0] if self.client else "unknown"

    return GuardedH11Protocol
