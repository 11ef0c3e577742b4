"""The in-process search index moves exactly with the store's commits (issue 8): after
concurrent admissions, forgets, refusals and searches it equals an index rebuilt from the
store, and it stops being trusted when a commit's outcome is unknown."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from engram_memory.core.index_loading import follow_store
from engram_memory.core.runtime import Services
from engram_memory.core.search_index import SearchIndex
from engram_memory.store.index_changes import IndexChange, IndexCommits, RecordStateSet
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record, forget, value

SEARCH = "engram_memory_search"


def test_a_followed_index_equals_one_rebuilt_from_the_store_after_concurrent_calls(
    alice: Caller, services: Services
) -> None:
    assert services.search_index is not None
    failures: list[BaseException] = []

    def writer(caller: Caller, label: str) -> None:
        try:
            for n in range(6):
                record_id = accepted_record(caller, f"{label} parcel refund note {n}.")
                if n % 3 == 0:
                    value(forget(caller, record_id))
        except BaseException as exc:  # reported below: a thread must not swallow it
            failures.append(exc)

    def reader() -> None:
        try:
            for _ in range(12):
                value(
                    alice.call(
                        SEARCH, {"query": "parcel refund", "purpose_ref": "purpose:support-case"}
                    )
                )
        except BaseException as exc:
            failures.append(exc)

    threads = [
        threading.Thread(target=writer, args=(alice, "alice")),
        threading.Thread(target=writer, args=(alice, "second")),
        threading.Thread(target=reader),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []

    rebuilt = SearchIndex()
    with services.database.reading() as tx:
        rebuilt.load(tx)
    followed = services.search_index.rows()
    assert followed == rebuilt.rows()
    assert sum(len(rows) for rows in followed.values()) == 12 - 4


class _Recorder:
    def __init__(self) -> None:
        self.applied: list[Sequence[IndexChange]] = []
        self.invalidated = 0

    def apply(self, changes: Sequence[IndexChange]) -> None:
        self.applied.append(changes)

    def invalidate(self) -> None:
        self.invalidated += 1


def test_only_committed_changes_are_applied_and_an_unknown_outcome_invalidates() -> None:
    commits = IndexCommits()
    recorder = _Recorder()
    commits.follow(recorder)
    change = [RecordStateSet("scope:a", "mem_a", "historical")]
    for outcome in ("committed", "rolled_back", "unknown"):
        commits.begin(change)
        assert commits.stable_sequence(0) is None, "a commit in flight is never stable"
        commits.end(change, outcome)  # type: ignore[arg-type]
    assert recorder.applied == [change]
    assert recorder.invalidated == 1
    assert commits.stable_sequence(0) == 6


def test_an_invalidated_index_refuses_to_rank_so_search_reads_the_store(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice, "Courier returned the parcel.")
    index = services.search_index
    assert index is not None
    index.invalidate()
    before = index.rankings
    found = value(alice.call(SEARCH, {"query": "courier", "purpose_ref": alice.purpose_ref}))
    assert [p["record"]["record_id"] for p in found["records"]] == [record_id]
    assert index.rankings == before


def test_a_store_opened_again_loads_the_same_index(services: Services, alice: Caller) -> None:
    for n in range(3):
        accepted_record(alice, f"Invoice {n} corrected.")
    assert services.search_index is not None
    again = follow_store(services.database)
    try:
        assert again.rows() == services.search_index.rows()
    finally:
        services.database.index_commits.follow(services.search_index)
