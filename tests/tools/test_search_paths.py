"""Search through the in-process index answers exactly as through the store (issue 8), and a
page record that cannot be opened drops out of its page instead of failing the search."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from engram_memory.core.runtime import Services
from engram_memory.tools.dispatch import MemoryService
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record, forget, value

SEARCH = "engram_memory_search"
SCOPE = "tenant:acme/workspace:support"
TEXTS = [
    "Refund approved for the damaged parcel.",
    "Refund refused: parcel delivered intact.",
    "Customer asked about the parcel tracking number.",
    "Escalated the refund to the billing team.",
    "Billing team confirmed the refund and the parcel return.",
    "Tracking number corrected after the courier called.",
    "Courier lost the parcel; refund approved again.",
]
QUERIES = ["refund", "parcel refund", "tracking courier", "billing refund parcel", "absent"]


def _pages(caller: Caller, query: str, limit: int) -> list[dict[str, Any]]:
    arguments: dict[str, Any] = {"query": query, "purpose_ref": caller.purpose_ref, "limit": limit}
    pages = [value(caller.call(SEARCH, arguments))]
    while "next_page_cursor" in pages[-1]:
        cursor = pages[-1]["next_page_cursor"]
        pages.append(value(caller.call(SEARCH, {**arguments, "page_cursor": cursor})))
    return pages


def _comparable(pages: list[dict[str, Any]]) -> list[Any]:
    receipt = pages[0]["rank_receipt"]
    return [
        receipt["candidate_count"],
        receipt["candidate_ids_digest"],
        receipt["ordered_ids_digest"],
        [
            (packet["record"]["record_id"], packet["score"], packet["rank"])
            for page in pages
            for packet in page["records"]
        ],
    ]


def _store_only(caller: Caller, services: Services) -> Caller:
    return replace(caller, service=MemoryService(replace(services, search_index=None)))


def test_search_ranks_and_pages_from_the_index_exactly_as_from_the_store(
    alice: Caller, services: Services
) -> None:
    for text in TEXTS:
        accepted_record(alice, text)
    forget_me = accepted_record(alice, "Refund parcel courier billing tracking.")
    value(forget(alice, forget_me))
    assert services.search_index is not None
    before = services.search_index.rankings
    from_store = _store_only(alice, services)
    for query in QUERIES:
        for limit in (1, 2, 10):
            assert _comparable(_pages(alice, query, limit)) == _comparable(
                _pages(from_store, query, limit)
            )
    assert services.search_index.rankings > before, "the index must have ranked"


def test_a_page_record_whose_key_is_gone_drops_out_and_the_rest_is_served(
    alice: Caller, services: Services
) -> None:
    ids = [accepted_record(alice, f"Parcel refund case {n}.") for n in range(3)]
    first = value(alice.call(SEARCH, {"query": "parcel", "purpose_ref": alice.purpose_ref}))
    ranked = [packet["record"]["record_id"] for packet in first["records"]]
    assert sorted(ranked) == sorted(ids)
    lost = ranked[1]
    services.keys.path_for(SCOPE, lost).unlink()

    after = value(alice.call(SEARCH, {"query": "parcel", "purpose_ref": alice.purpose_ref}))

    served = [(p["record"]["record_id"], p["rank"]) for p in after["records"]]
    assert served == [(ranked[0], 1), (ranked[2], 3)]
    assert after["rank_receipt"]["candidate_count"] == 3
    with services.database.reading() as tx:
        row = tx.fetchone(
            "SELECT outcome, target_ids_json, detail FROM audit_entries "
            "WHERE tool = 'engram_memory_search' ORDER BY sequence DESC LIMIT 1"
        )
    assert row is not None
    assert row[0] == "ok"
    assert json.loads(row[1]) == sorted([ranked[0], ranked[2], lost])  # served and dropped
    assert "BLOB_MISSING" in row[2]


def test_a_page_whose_only_record_cannot_open_is_empty_but_keeps_its_cursor(
    alice: Caller, services: Services
) -> None:
    ids = [accepted_record(alice, f"Courier note {n}.") for n in range(2)]
    first = value(alice.call(SEARCH, {"query": "courier", "purpose_ref": alice.purpose_ref}))
    top = first["records"][0]["record"]["record_id"]
    services.keys.path_for(SCOPE, top).unlink()

    page = value(
        alice.call(SEARCH, {"query": "courier", "purpose_ref": alice.purpose_ref, "limit": 1})
    )
    assert page["records"] == []
    following = value(
        alice.call(
            SEARCH,
            {
                "query": "courier",
                "purpose_ref": alice.purpose_ref,
                "limit": 1,
                "page_cursor": page["next_page_cursor"],
            },
        )
    )
    assert [p["record"]["record_id"] for p in following["records"]] == [
        record_id for record_id in ids if record_id != top
    ]
    assert [p["rank"] for p in following["records"]] == [2]
