"""Packet budget and paging of search packets (SPEC §4.1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import rfc8785

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.search.packets import packet_budget, packet_cost, search_packet, take_page


def _packet(rank: int, pad: int = 100) -> dict[str, Any]:
    return search_packet(
        {"record_id": f"mem_{rank:04d}", "text": "x" * pad},
        ["/derivation"],
        "sha256:" + "0" * 64,
        0.9876543210123,
        rank,
    )


def _cost(packet: dict[str, Any]) -> int:
    return len(rfc8785.dumps(packet))


def test_packet_costs_its_jcs_byte_length() -> None:
    packet = _packet(1)
    packet["record"]["text"] = "é"  # two UTF-8 bytes
    assert packet_cost(packet) == _cost(packet)


def test_page_that_fits_exactly_takes_every_packet() -> None:
    packets = [_packet(r) for r in (1, 2, 3)]
    budget = sum(_cost(p) for p in packets)
    page, next_offset = take_page(packets, offset=0, total=3, limit=10, budget=budget)
    assert page == packets
    assert next_offset is None


def test_page_stops_before_the_first_packet_that_would_overflow() -> None:
    packets = [_packet(r) for r in (1, 2, 3)]
    budget = _cost(packets[0]) + _cost(packets[1]) - 1
    page, next_offset = take_page(packets, offset=0, total=3, limit=10, budget=budget)
    assert page == packets[:1]
    assert next_offset == 1


def test_continuation_page_reports_absolute_next_offset() -> None:
    packets = [_packet(r) for r in (11, 12, 13)]
    page, next_offset = take_page(packets, offset=10, total=40, limit=2, budget=1_000_000)
    assert [p["rank"] for p in page] == [11, 12]
    assert next_offset == 12


def test_first_packet_alone_over_budget_is_projection_oversized() -> None:
    packets = [_packet(1)]
    with pytest.raises(ToolError) as caught:
        take_page(packets, offset=0, total=1, limit=10, budget=_cost(packets[0]) - 1)
    assert caught.value.code is ErrorCode.PROJECTION_OVERSIZED


def test_first_packet_of_a_continuation_over_budget_is_projection_oversized() -> None:
    with pytest.raises(ToolError) as caught:
        take_page([_packet(5, pad=5000)], offset=4, total=6, limit=10, budget=4096)
    assert caught.value.code is ErrorCode.PROJECTION_OVERSIZED


def test_zero_matches_is_an_empty_final_page() -> None:
    assert take_page([], offset=0, total=0, limit=10, budget=4096) == ([], None)


def test_packets_are_drawn_lazily_and_at_most_limit() -> None:
    drawn: list[int] = []

    def packets() -> Iterator[dict[str, Any]]:
        for rank in range(1, 100):
            drawn.append(rank)
            yield _packet(rank)

    page, next_offset = take_page(packets(), offset=0, total=99, limit=3, budget=1_000_000)
    assert len(page) == 3
    assert drawn == [1, 2, 3]
    assert next_offset == 3


def test_fewer_packets_than_ranked_ids_is_projection_stale() -> None:
    with pytest.raises(ToolError) as caught:
        take_page([_packet(1)], offset=0, total=2, limit=10, budget=1_000_000)
    assert caught.value.code is ErrorCode.PROJECTION_STALE


@pytest.mark.parametrize(
    ("offset", "total", "limit", "budget"),
    [(-1, 3, 1, 10), (4, 3, 1, 10), (0, 3, 0, 10), (0, 3, 1, 0)],
)
def test_out_of_range_page_bounds_are_refused(
    offset: int, total: int, limit: int, budget: int
) -> None:
    with pytest.raises(ValueError, match="range"):
        take_page([], offset=offset, total=total, limit=limit, budget=budget)


def test_budget_is_the_smaller_of_request_and_redaction_cap() -> None:
    assert packet_budget(65_536, 8_192) == 8_192
    assert packet_budget(4_096, 8_192) == 4_096
    assert packet_budget(65_536, None) == 65_536
    with pytest.raises(ValueError, match="positive"):
        packet_budget(65_536, 0)


def test_search_packet_has_the_output_shape() -> None:
    packet = _packet(3)
    assert set(packet) == {"record", "redacted_fields", "redaction_receipt_digest", "score", "rank"}
    assert packet["rank"] == 3
