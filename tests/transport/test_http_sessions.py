"""Session bookkeeping: two budgets (unbound sessions per address, bound ones per principal)
under one server cap, the oldest idle unbound session ended to make room before anything is
refused, an unbound session ending after its grace, a bound one only after idling."""

from __future__ import annotations

from engram_memory.contract.refusals import RefusalReason
from engram_memory.transport.http_sessions import Admission, Expiry, SessionTable
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
        max_sessions_per_principal=int(limits.get("per_principal", 2)),
        unbound_session_seconds=limits.get("unbound", 10),
        session_idle_seconds=limits.get("idle", 60),
    )
    return SessionTable(settings, clock)


def _evicted(admission: Admission) -> str | None:
    return None if admission.evict is None else admission.evict[0]


def _open(
    table: SessionTable, clock: Clock, peer: str, session_id: str, principal: str | None = None
) -> None:
    admission = table.reserve(peer)
    assert admission.refused is None
    clock.now += 1
    table.opened(peer, session_id, principal, scope={"id": session_id})


def test_places_still_opening_count_and_are_never_ended_to_make_room() -> None:
    table = _table(Clock())
    assert table.reserve("a").refused is None
    assert table.reserve("a").refused is None  # both still opening: nothing idle to end
    assert table.reserve("a").refused is RefusalReason.SESSION_LIMIT
    table.opened("a", "s1", None, scope={})
    table.release("a")  # the second opening failed: its place comes back
    assert table.reserve("a").refused is None
    assert table.per_peer("a") == 2


def test_a_flood_of_unbound_sessions_ends_its_own_oldest_not_a_bound_one() -> None:
    clock = Clock()
    table = _table(clock, max_sessions=10, per_peer=2)
    _open(table, clock, "a", "host", principal="acme/user:alice")  # bound at once
    _open(table, clock, "a", "f1")
    _open(table, clock, "a", "f2")
    admission = table.reserve("a")  # the address has its two unbound ones: f1 makes room
    assert admission.refused is None
    assert _evicted(admission) == "f1"
    table.opened("a", "f3", None, scope={})
    assert {table.get(s) is not None for s in ("host", "f2", "f3")} == {True}
    assert table.get("f1") is None
    assert table.per_peer("a") == 2


def test_a_session_with_a_request_in_flight_is_not_ended_to_make_room() -> None:
    clock = Clock()
    table = _table(clock, per_peer=2)
    _open(table, clock, "a", "s1")
    _open(table, clock, "a", "s2")
    table.begin("s1")  # the oldest is busy: the next oldest goes
    admission = table.reserve("a")
    assert _evicted(admission) == "s2"
    table.release("a")
    table.begin("s1")
    _open(table, clock, "a", "s3")
    table.begin("s3")
    assert table.reserve("a").refused is RefusalReason.SESSION_LIMIT


def test_the_server_cap_ends_the_oldest_idle_unbound_session_of_any_address() -> None:
    clock = Clock()
    table = _table(clock, max_sessions=3, per_peer=2)
    _open(table, clock, "a", "s1", principal="acme/user:alice")
    _open(table, clock, "b", "s2")
    _open(table, clock, "a", "s3")
    admission = table.reserve("c")
    assert _evicted(admission) == "s2"
    table.opened("c", "s4", "acme/user:carol", scope={})
    table.bind("s3", "acme/user:bob")
    # Every session is bound now: the server's cap refuses.
    assert table.reserve("d").refused is RefusalReason.SESSION_LIMIT
    table.forget("s1")
    assert table.reserve("d").refused is None


def test_bound_sessions_count_per_principal_and_over_it_a_session_stays_unbound() -> None:
    clock = Clock()
    table = _table(clock, max_sessions=10, per_peer=5, per_principal=2)
    for session_id in ("s1", "s2", "s3"):
        _open(table, clock, "a", session_id)
    assert table.bind("s1", "acme/user:alice")
    assert table.bind("s2", "acme/user:alice")
    assert not table.bind("s3", "acme/user:alice")  # over the principal's share
    assert table.bind("s3", "acme/user:bob")  # another principal has its own
    assert table.per_principal("acme/user:alice") == 2
    assert table.per_peer("a") == 0  # bound sessions leave the address's budget


def test_an_unbound_session_expires_after_its_grace_even_while_in_flight() -> None:
    clock = Clock()
    table = _table(clock, unbound=10)
    table.reserve("a")
    table.opened("a", "s1", None, scope={"method": "DELETE"})
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
    table.opened("a", "s1", None, scope={})
    table.bind("s1", "acme/user:alice")
    table.begin("s1")  # e.g. an open GET stream
    clock.now += 600
    assert table.take_expired() == []
    table.end("s1")
    clock.now += 59
    assert table.take_expired() == []
    clock.now += 1
    assert [why for _, _, why in table.take_expired()] == [Expiry.IDLE]
