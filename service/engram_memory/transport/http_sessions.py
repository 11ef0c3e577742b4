"""The streamable HTTP sessions the transport guard admits, per server and per peer.

A session is opened by an `initialize` request; it is *bound* once a request on it (the
`initialize` included) carries a valid invocation context. An unbound session ends
`unbound_session_seconds` after it opened, a bound one after `session_idle_seconds` with no
request in flight (an open GET stream counts as one). Pure bookkeeping with an injectable
clock: http_limits.py asks it and ends what it says has expired.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from engram_memory.contract.refusals import RefusalReason
from engram_memory.transport.http_settings import HttpSettings


class Expiry(Enum):
    UNBOUND = "unbound"  # no valid invocation context arrived in time
    IDLE = "idle"


@dataclass
class Session:
    peer: str
    opened_at: float
    bound: bool
    # The opening request's scope: ending the session replays it as a DELETE (the SDK's
    # own way to terminate a session), with the Host/Origin headers that passed its checks.
    scope: dict[str, Any] = field(repr=False)
    in_flight: int = 0
    idle_since: float = 0.0


class SessionTable:
    """Admission and expiry of sessions; not thread-safe (one event loop uses it)."""

    def __init__(self, settings: HttpSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings, self._clock = settings, clock
        self._sessions: dict[str, Session] = {}
        self._opening: Counter[str] = Counter()  # initialize requests not answered yet

    def __len__(self) -> int:
        return len(self._sessions)

    def per_peer(self, peer: str) -> int:
        """Sessions open or opening for `peer`."""
        return self._opening[peer] + sum(1 for s in self._sessions.values() if s.peer == peer)

    def reserve(self, peer: str) -> RefusalReason | None:
        """Hold a place for a session `peer` is opening, or say why there is none."""
        if len(self._sessions) + self._opening.total() >= self._settings.max_sessions:
            return RefusalReason.SESSION_LIMIT
        if self.per_peer(peer) >= self._settings.max_sessions_per_peer:
            return RefusalReason.SESSION_LIMIT
        self._opening[peer] += 1
        return None

    def release(self, peer: str) -> None:
        """The opening request did not open a session: give its place back."""
        self._opening[peer] -= 1
        if self._opening[peer] <= 0:
            del self._opening[peer]

    def opened(self, peer: str, session_id: str, bound: bool, scope: dict[str, Any]) -> None:
        """The reserved place became session `session_id`."""
        self.release(peer)
        now = self._clock()
        self._sessions[session_id] = Session(peer, now, bound, scope, idle_since=now)

    def adopt(self, peer: str, session_id: str, scope: dict[str, Any]) -> None:
        """Track a session that opened without a reservation (unbound: it ends soon)."""
        now = self._clock()
        self._sessions[session_id] = Session(peer, now, False, scope, idle_since=now)

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def bind(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.bound = True

    def begin(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.in_flight += 1

    def end(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.in_flight = max(0, session.in_flight - 1)
            if not session.in_flight:
                session.idle_since = self._clock()

    def forget(self, session_id: str) -> Session | None:
        return self._sessions.pop(session_id, None)

    def take_expired(self) -> list[tuple[str, Session, Expiry]]:
        """Forget and return every session whose time ran out."""
        now = self._clock()
        expired: list[tuple[str, Session, Expiry]] = []
        for session_id, session in list(self._sessions.items()):
            unbound = now - session.opened_at >= self._settings.unbound_session_seconds
            idle = now - session.idle_since >= self._settings.session_idle_seconds
            if not session.bound and unbound:
                expired.append((session_id, session, Expiry.UNBOUND))
            elif session.bound and idle and not session.in_flight:
                expired.append((session_id, session, Expiry.IDLE))
        for session_id, _, _ in expired:
            del self._sessions[session_id]
        return expired
