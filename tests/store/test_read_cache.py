"""The read cache (store/read_cache.py): keyed by scope, exact through its one seam, never
refilled from a snapshot older than a change, bounded by bytes."""

from __future__ import annotations

from dataclasses import replace

from engram_memory.store.index_changes import (
    DocumentIndexed,
    DocumentPurged,
    RecordAdmitted,
    RecordRow,
    RecordStateSet,
    RecordWritten,
)
from engram_memory.store.read_cache import ROW_OVERHEAD_BYTES, RecordCache

ACME = "tenant:acme/workspace:support"
GLOBEX = "tenant:globex/workspace:main"


def _row(
    record_id: str = "mem_a", body: bytes = b"sealed", state: str = "accepted_current"
) -> RecordRow:
    return RecordRow(record_id, state, "r", "p", "g", 1, 1, 0, None, None, body)


def test_a_row_is_found_only_in_its_own_scope() -> None:
    cache = RecordCache()
    cache.publish(ACME, _row())

    assert cache.lookup(ACME, "mem_a") == _row()
    assert cache.lookup(GLOBEX, "mem_a") is None


def test_a_committed_transaction_publishes_its_rows_and_evicts_changed_records() -> None:
    cache = RecordCache()
    admitted = RecordAdmitted(ACME, "mem_a", 1, 1, 0, None, None)
    cache.apply([admitted, RecordWritten(ACME, _row()), DocumentIndexed(ACME, "mem_a", {}, ())])
    assert cache.holds(ACME, "mem_a")

    cache.apply([RecordStateSet(ACME, "mem_a", "tombstoned")])
    assert not cache.holds(ACME, "mem_a")

    cache.apply([RecordWritten(ACME, _row())])
    cache.apply([DocumentPurged(ACME, "mem_a")])
    assert not cache.holds(ACME, "mem_a")


def test_only_rows_eligible_by_state_are_kept() -> None:
    cache = RecordCache()
    cache.publish(ACME, _row("mem_t", state="tombstoned"))
    cache.fill(ACME, _row("mem_n", body=b""), cache.version())
    cache.fill(ACME, replace(_row("mem_b"), sealed_body=None), cache.version())

    assert cache.size() == (1, ROW_OVERHEAD_BYTES)  # only mem_n: an empty body is a body
    assert not cache.holds(ACME, "mem_t")
    assert not cache.holds(ACME, "mem_b")


def test_a_row_read_before_a_change_is_not_kept_after_it() -> None:
    """A get read the row in its snapshot; a forget committed and evicted before the get
    could keep it: keeping it would serve a forgotten record."""
    cache = RecordCache()
    version = cache.version()  # the get, before its snapshot began
    cache.evict(ACME, "mem_a")  # the forget's COMMIT

    cache.fill(ACME, _row(), version)

    assert not cache.holds(ACME, "mem_a")


def test_a_row_kept_before_a_change_is_evicted_by_it() -> None:
    cache = RecordCache()
    cache.fill(ACME, _row(), cache.version())
    assert cache.holds(ACME, "mem_a")

    cache.apply([RecordStateSet(ACME, "mem_a", "tombstoned")])

    assert not cache.holds(ACME, "mem_a")


def test_an_unknown_commit_outcome_clears_everything() -> None:
    cache = RecordCache()
    cache.publish(ACME, _row("mem_a"))
    cache.publish(GLOBEX, _row("mem_b"))
    version = cache.version()

    cache.clear()
    cache.fill(ACME, _row("mem_a"), version)

    assert cache.size() == (0, 0)


def test_the_bound_drops_the_least_recently_used_rows() -> None:
    body = b"x" * 400
    cost = ROW_OVERHEAD_BYTES + len(body)
    cache = RecordCache(max_bytes=cost * 4)
    for n in range(4):
        cache.publish(ACME, _row(f"mem_{n}", body))
    cache.lookup(ACME, "mem_0")  # used: the next row pushes out mem_1

    cache.publish(ACME, _row("mem_4", body))

    assert [cache.holds(ACME, f"mem_{n}") for n in range(5)] == [True, False, True, True, True]
    assert cache.size() == (4, cost * 4)


def test_a_row_over_a_quarter_of_the_bound_is_not_kept_and_zero_turns_it_off() -> None:
    cache = RecordCache(max_bytes=4 * ROW_OVERHEAD_BYTES + 100)
    cache.publish(ACME, _row("mem_big", b"x" * (ROW_OVERHEAD_BYTES + 100)))
    assert not cache.holds(ACME, "mem_big")
    cache.publish(ACME, _row("mem_small"))
    assert cache.holds(ACME, "mem_small")

    cache.resize(0)

    assert cache.size() == (0, 0)
    cache.publish(ACME, _row("mem_small"))
    assert not cache.holds(ACME, "mem_small")
