"""Issue 20 item 3: `get` and search pages read record rows and item keys from memory, and the
memory is exact: a forget or withdraw leaves nothing of the item there, an id of another
scope is NOT_FOUND through the cache too, and a hit runs no DuckDB statement."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from engram_memory.core.runtime import Services
from engram_memory.store.transaction import Transaction
from tests.harness import Caller
from tests.tools.test_tool_rules import (
    accepted_record,
    capture,
    code,
    forget,
    value,
    withdraw,
)

SCOPE = "tenant:acme/workspace:support"
GET = "engram_memory_get"
SEARCH = "engram_memory_search"


@pytest.fixture
def store_reads(services: Services, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Read snapshots begun and statements run from here on (an observer only)."""
    seen: Counter[str] = Counter()
    for name in ("fetchall", "fetchone"):
        original = getattr(Transaction, name)

        def observed(tx: Transaction, *args: Any, _original: Any = original) -> Any:
            seen["statements"] += 1
            return _original(tx, *args)

        monkeypatch.setattr(Transaction, name, observed)
    reading = services.database.reading

    def counted(**kwargs: Any) -> Any:
        seen["snapshots"] += 1
        return reading(**kwargs)

    monkeypatch.setattr(services.database, "reading", counted)
    return seen


def _get(caller: Caller, record_id: str) -> dict[str, Any]:
    return caller.call(GET, {"record_id": record_id, "purpose_ref": caller.purpose_ref})


def _found(caller: Caller, query: str) -> list[str]:
    found = value(caller.call(SEARCH, {"query": query, "purpose_ref": caller.purpose_ref}))
    return [packet["record"]["record_id"] for packet in found["records"]]


def test_a_get_and_a_search_page_after_admission_read_no_store(
    alice: Caller, services: Services, store_reads: Counter[str]
) -> None:
    record_id = accepted_record(alice, "Courier lost parcel 4411.")
    store_reads.clear()

    assert value(_get(alice, record_id))["record"]["record_id"] == record_id
    assert _found(alice, "parcel") == [record_id]

    assert store_reads == Counter()
    assert services.database.read_cache.holds(SCOPE, record_id)


def test_after_forget_neither_the_row_nor_a_key_of_the_item_stays_in_memory(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice, "Courier lost parcel 5522.")
    value(_get(alice, record_id))  # its key is now read, and kept
    assert services.keys.opened.holds(SCOPE, record_id)
    assert services.database.read_cache.holds(SCOPE, record_id)

    value(forget(alice, record_id))

    # Checked on the objects themselves: crypto-shredding holds for memory too.
    assert not services.database.read_cache.holds(SCOPE, record_id)
    assert not services.keys.opened.holds(SCOPE, record_id)
    assert code(_get(alice, record_id)) == "NOT_FOUND"
    assert record_id not in _found(alice, "parcel")


def test_after_withdraw_the_candidates_key_is_not_in_memory(
    alice: Caller, services: Services
) -> None:
    candidate_id = capture(alice, "Draft the agent takes back.")["candidate_id"]
    services.keys.load_item_key(services.root_key, SCOPE, candidate_id)
    assert services.keys.opened.holds(SCOPE, candidate_id)

    value(withdraw(alice, candidate_id))

    assert not services.keys.opened.holds(SCOPE, candidate_id)


def test_an_id_of_another_scope_is_not_found_through_the_cache(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice, "Courier lost parcel 6633.")
    value(_get(alice, record_id))
    assert services.database.read_cache.holds(SCOPE, record_id)
    carol = alice.as_(tenant="globex", workspace="main", principal="user:carol")

    assert code(_get(carol, record_id)) == "NOT_FOUND"
    assert _found(carol, "parcel") == []


def test_a_key_file_removed_behind_the_stores_back_is_not_served_from_memory(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice, "Courier lost parcel 7744.")
    value(_get(alice, record_id))
    assert services.keys.opened.holds(SCOPE, record_id)

    services.keys.path_for(SCOPE, record_id).unlink()

    assert code(_get(alice, record_id)) == "BLOB_MISSING"


def test_a_cache_turned_off_serves_the_same_answers_from_the_store(
    alice: Caller, services: Services, store_reads: Counter[str]
) -> None:
    services.database.read_cache.resize(0)
    services.keys.opened.resize(0)
    record_id = accepted_record(alice, "Courier lost parcel 8855.")
    store_reads.clear()

    assert value(_get(alice, record_id))["record"]["record_id"] == record_id
    assert _found(alice, "parcel") == [record_id]

    assert store_reads["snapshots"] == 2
    assert services.database.read_cache.size() == (0, 0)
    assert len(services.keys.opened) == 0


def test_a_read_served_from_memory_tells_the_projector_the_store_is_busy(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a read snapshot beginning would: the background projector then leaves the call in
    flight alone instead of flushing a projection beside its append (store/projector.py)."""
    record_id = accepted_record(alice, "Courier lost parcel 9966.")
    value(_get(alice, record_id))
    seen: list[str] = []
    monkeypatch.setattr(services.database, "read_from_memory", lambda: seen.append("read"))

    value(_get(alice, record_id))
    assert _found(alice, "parcel") == [record_id]

    assert seen == ["read", "read"]
