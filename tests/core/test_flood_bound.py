"""core/flood_bound.py: a refusal storm writes at most `burst + 1` entries per key and window,
and its counts are exact."""

from __future__ import annotations

import pytest

from engram_memory.core import flood_bound
from engram_memory.core.flood_bound import FloodCounter, FloodLimits

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = pytest.mark.xdist_group("timing")

KEY = ("host", "127.0.0.1", "token_invalid", "tools/call")


def _storm(counter: FloodCounter, calls: int, start_ms: int, spacing_ms: float) -> int:
    individual = 0
    for n in range(calls):
        individual += counter.admit(KEY, start_ms + int(n * spacing_ms), "template")
    return individual


def test_ten_thousand_refusals_in_a_minute_make_burst_entries_and_one_summary() -> None:
    counter = FloodCounter(FloodLimits(burst=10, interval_ms=60_000))
    individual = _storm(counter, 10_000, start_ms=1_000, spacing_ms=5.9)
    assert individual == 10
    assert counter.due(60_999) == []  # the window is still open
    (summary,) = counter.due(61_000)
    assert summary.occurrences == 9_990
    assert (summary.first_ms, summary.last_ms) == (1_000 + int(10 * 5.9), 1_000 + int(9_999 * 5.9))
    assert summary.template == "template"
    assert counter.due(10**9) == []


def test_a_new_window_audits_its_own_burst_and_an_ended_one_still_owes_its_summary() -> None:
    counter = FloodCounter(FloodLimits(burst=2, interval_ms=1_000))
    assert [counter.admit(KEY, t, "a") for t in (0, 1, 2, 3)] == [True, True, False, False]
    # The next window opens before anyone flushed: the old summary is kept, not lost.
    assert [counter.admit(KEY, t, "b") for t in (1_000, 1_001, 1_002)] == [True, True, False]
    assert counter.next_end_ms() == 0
    owed = counter.due(1_500)
    assert [(c.occurrences, c.template) for c in owed] == [(2, "a")]
    assert [(c.occurrences, c.template) for c in counter.drain()] == [(1, "b")]


def test_keys_are_counted_apart() -> None:
    counter = FloodCounter(FloodLimits(burst=1, interval_ms=1_000))
    other = ("host", "127.0.0.2", "token_invalid", "tools/call")
    assert counter.admit(KEY, 0, "a")
    assert counter.admit(other, 0, "b")
    assert not counter.admit(KEY, 1, "a")
    assert [c.key for c in counter.due(1_000)] == [KEY]


def test_counted_calls_keep_their_audit_ids_for_the_summary() -> None:
    counter = FloodCounter(FloodLimits(burst=0, interval_ms=1_000))
    assert not counter.admit(KEY, 0, "a", ("audit:1", 9))
    assert not counter.admit(KEY, 1, "a", ("audit:2", 9))
    (summary,) = counter.drain()
    assert summary.audit_ids == [("audit:1", 9), ("audit:2", 9)]


def test_beyond_the_open_key_cap_peers_share_one_coarse_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flood_bound, "MAX_OPEN_KEYS", 2)
    counter = FloodCounter(FloodLimits(burst=0, interval_ms=1_000))
    for peer in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"):
        counter.admit(("host", peer, "token_invalid", "tools/call"), 0, peer)
    keys = sorted((c.key[1], c.occurrences) for c in counter.drain())
    assert keys == [("*", 2), ("10.0.0.1", 1), ("10.0.0.2", 1)]


def test_a_window_ended_without_counting_makes_room_for_a_new_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flood_bound, "MAX_OPEN_KEYS", 1)
    counter = FloodCounter(FloodLimits(burst=1, interval_ms=1_000))
    assert counter.admit(KEY, 0, "a")
    other = ("host", "10.0.0.9", "token_invalid", "tools/call")
    assert counter.admit(other, 1_000, "b")
    assert not counter.admit(other, 1_001, "b")
    assert [c.key for c in counter.drain()] == [other]


def test_limits_must_be_usable() -> None:
    with pytest.raises(ValueError, match="interval"):
        FloodLimits(burst=1, interval_ms=0)
    with pytest.raises(ValueError, match="burst"):
        FloodLimits(burst=-1)
