"""Session bookkeeping: caps per server and per peer (places reserved while opening), an
unbound session ending after its grace, a bound one only after idling with nothing in flight."""

from __future__ import annotations

from engram_memory.contract.refusals import RefusalReason
from engram_memory.transport.http_sessions import Expiry, SessionTable
from engram_memory.transport.http_settings import HttpSettings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _table(clock: Clock, **limits: float) -> SessionTable:
    settings = HttpSettings(
        max_sessions=int(limits.get("max_sessions", 4)),
        max_sessions_per_peer=int(limits.get("per_peer", 2)),
        unbound_session_seconds=limits.get("unbound", 10),
        session_idle_seconds=limits.get("idle", 60),
    )
    return SessionTable(settings, clock)


def test_a_peer_gets_at_most_its_share_counting_sessions_still_opening() -> None:
    table = _table(Clock())
    assert table.reserve("a") is None
    assert table.reserve("a") is None  # both still opening
    assert table.reserve("a") is RefusalReason.SESSION_LIMIT
    table.opened("a", "s1", bound=False, scope={})
    table.release("a")  # the second opening failed: its place comes back
    assert table.reserve("a") is None
    assert table.per_peer("a") == 2


def test_the_server_cap_holds_across_peers() -> None:
    table = _table(Clock(), max_sessions=3, per_peer=2)
    for peer, session_id in [("a", "s1"), ("a", "s2"), ("b", "s3")]:
        assert table.reserve(peer) is None
        table.opened(peer, session_id, bound=True, scope={})
    assert table.reserve("c") is RefusalReason.SESSION_LIMIT
    table.forget("s1")
    assert table.reserve("c") is None


def test_an_unbound_session_expires_after_its_grace_even_while_in_flight() -> None:
    clock = Clock()
    table = _table(clock, unbound=10)
    table.reserve("a")
    table.opened("a", "s1", bound=False, scope={"method": "DELETE"})
    table.begin("s1")
    clock.now += 9.9
    assert table.take_expired() == []
    clock.now += 0.1
    [(session_id, session, why)] = table.take_expired()
    assert (session_id, why, session.scope) == ("s1", Expiry.UNBOUND, {"method": "DELETE"})
    assert table.get("s1") is None
    assert table.per_peer("a") == 0


def test_a_bound_session_expires_only_after_idling_with_nothing_in_flight() -> None:
    clock = Clock()
    table = _table(clock, unbound=10, idle=60)
    table.reserve("a")
    table.opened("a", "s1", bound=False, scope={})
    table.bind("s1")
    table.begin("s1")  # e.g. an open GET stream
    clock.now += 600
    assert table.take_expired() == []
    table.end("s1")
    clock.now += 59
    assert table.take_expired() == []
    clock.now += 1
    assert [why for _, _, why in table.take_expired()] == [Expiry.IDLE]
