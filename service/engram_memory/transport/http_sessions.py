"""The streamable HTTP sessions the transport guard admits: two budgets, so that a flood of
sessions nobody has proven cannot push out the hosts that did.

A session is opened by an `initialize` request; it is *bound* once a request on it (the
`initialize` included) carries a valid invocation context, and then counts against its
principal (`max_sessions_per_principal`, per tenant and principal), no longer against its
address. An *unbound* session counts against its address (`max_sessions_per_peer`) and ends
`unbound_session_seconds` after it opened; a bound one ends after `session_idle_seconds` with
no request in flight (an open GET stream counts as one).

When an address has its share of unbound sessions, or the server has `max_sessions` in all,
a new `initialize` does not wait for one to expire: the oldest unbound session with nothing in
flight (of that address, or of anyone for the server's cap) is ended to make room. A flood
from the address a legitimate host shares (every local client is 127.0.0.1) then only ends
the flood's own sessions: the host's binds with its first call, a few milliseconds after it
opened, and is out of reach from then on. Only when every session is bound or busy is an
`initialize` refused.

Pure bookkeeping with an injectable clock: http_guard.py asks it and ends what it says.
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
    principal: str | None = None  # "tenant/principal" once bound


@dataclass(frozen=True)
class Admission:
    """What `reserve` decided: a place (after ending `evict`, when given) or a refusal."""

    refused: RefusalReason | None = None
    evict: tuple[str, Session] | None = None


class SessionTable:
    """Admission and expiry of sessions; not thread-safe (one event loop uses it)."""

    def __init__(self, settings: HttpSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings, self._clock = settings, clock
        self._sessions: dict[str, Session] = {}
        self._opening: Counter[str] = Counter()  # initialize requests not answered yet

    def __len__(self) -> int:
        return len(self._sessions)

    def per_peer(self, peer: str) -> int:
        """Sessions of `peer` that are opening or open and not yet bound."""
        unbound = sum(1 for s in self._sessions.values() if s.peer == peer and not s.bound)
        return self._opening[peer] + unbound

    def per_principal(self, principal: str) -> int:
        """Bound sessions of `principal` ("tenant/principal")."""
        return sum(1 for s in self._sessions.values() if s.principal == principal)

    def reserve(self, peer: str) -> Admission:
        """Hold a place for a session `peer` is opening: free, made by ending the oldest idle
        unbound session (the caller ends `evict` before answering), or refused."""
        evict: tuple[str, Session] | None = None
        if self.per_peer(peer) >= self._settings.max_sessions_per_peer:
            evict = self._oldest_idle_unbound(peer)
            if evict is None:
                return Admission(refused=RefusalReason.SESSION_LIMIT)
        elif len(self._sessions) + self._opening.total() >= self._settings.max_sessions:
            evict = self._oldest_idle_unbound(None)
            if evict is None:
                return Admission(refused=RefusalReason.SESSION_LIMIT)
        if evict is not None:
            del self._sessions[evict[0]]
        self._opening[peer] += 1
        return Admission(evict=evict)

    def _oldest_idle_unbound(self, peer: str | None) -> tuple[str, Session] | None:
        candidates = [
            (session.opened_at, session_id, session)
            for session_id, session in self._sessions.items()
            if not session.bound and not session.in_flight and peer in (None, session.peer)
        ]
        if not candidates:
            return None
        _, session_id, session = min(candidates, key=lambda c: c[0])
        return session_id, session

    def release(self, peer: str) -> None:
        """The opening request did not open a session: give its place back."""
        self._opening[peer] -= 1
        if self._opening[peer] <= 0:
            del self._opening[peer]

    def opened(
        self, peer: str, session_id: str, principal: str | None, scope: dict[str, Any]
    ) -> None:
        """The reserved place became session `session_id`, bound to `principal` if given."""
        self.release(peer)
        now = self._clock()
        self._sessions[session_id] = Session(peer, now, False, scope, idle_since=now)
        if principal is not None:
            self.bind(session_id, principal)

    def adopt(self, peer: str, session_id: str, scope: dict[str, Any]) -> None:
        """Track a session that opened without a reservation (unbound: it ends soon)."""
        now = self._clock()
        self._sessions[session_id] = Session(peer, now, False, scope, idle_since=now)

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def bind(self, session_id: str, principal: str) -> bool:
        """Count the session against `principal` from now on; False (it stays unbound, so
        it ends soon) when `principal` already holds `max_sessions_per_principal`."""
        session = self._sessions.get(session_id)
        if session is None or session.bound:
            return session is not None
        if self.per_principal(principal) >= self._settings.max_sessions_per_principal:
            return False
        session.bound, session.principal = True, principal
        return True

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
