"""core/replay_guard.py: an audit id binds once until its token expires."""

from __future__ import annotations

import threading

from engram_memory.core.replay_guard import AuditIdGuard, kept_until_ms


def test_an_audit_id_binds_once_while_its_token_lives() -> None:
    guard = AuditIdGuard()
    assert guard.claim("audit:1", 10_000, now_ms=0)
    assert not guard.claim("audit:1", 10_000, now_ms=9_999)
    assert guard.claim("audit:2", 10_000, now_ms=9_999)


def test_an_id_is_forgotten_once_its_token_has_expired() -> None:
    guard = AuditIdGuard()
    assert guard.claim("audit:1", 10_000, now_ms=0)
    assert guard.claim("audit:1", 20_000, now_ms=10_000)
    assert len(guard) == 1


def test_ids_kept_by_the_store_are_refused_after_a_restart() -> None:
    guard = AuditIdGuard([("audit:1", 10_000), ("audit:2", 5_000)])
    assert not guard.claim("audit:1", 10_000, now_ms=6_000)
    assert guard.claim("audit:2", 12_000, now_ms=6_000)


def test_an_id_stays_bound_for_the_tolerated_clock_skew_after_expiry() -> None:
    assert kept_until_ms(1_000) > 1_000


def test_of_many_concurrent_claims_of_one_id_exactly_one_passes() -> None:
    guard = AuditIdGuard()
    start = threading.Barrier(16)
    results: list[bool] = []
    lock = threading.Lock()

    def claim() -> None:
        start.wait(timeout=10)
        passed = guard.claim("audit:race", 10_000, now_ms=0)
        with lock:
            results.append(passed)

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(results) == [False] * 15 + [True]
