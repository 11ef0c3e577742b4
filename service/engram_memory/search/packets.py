"""Search packets and the per-page byte budget (SPEC §4.1).

A page is filled in rank order, each packet costing its JCS byte length, and ends before the
first packet that would overflow the budget; the next cursor then points at that packet, so
nothing is skipped. A page that cannot hold even its first packet is an error, never an
empty success that would look like "no more results".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from engram_memory.contract.canonical import JsonValue, canonical_json, normalize
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError


def packet_budget(max_packet_bytes: int, redaction_byte_cap: int | None) -> int:
    """Budget = min(`max_packet_bytes`, redaction byte cap); no cap → `max_packet_bytes`.

    Raises:
        ValueError: a bound is not positive.
    """
    if max_packet_bytes < 1 or (redaction_byte_cap is not None and redaction_byte_cap < 1):
        raise ValueError("packet budgets must be positive")
    if redaction_byte_cap is None:
        return max_packet_bytes
    return min(max_packet_bytes, redaction_byte_cap)


def search_packet(
    record: Mapping[str, JsonValue],
    redacted_fields: Sequence[str],
    redaction_receipt_digest: str,
    score: float,
    rank: int,
) -> dict[str, JsonValue]:
    """One `records[]` entry of the search output; `rank` is 1-based in the whole list."""
    return {
        "record": dict(record),
        "redacted_fields": list(redacted_fields),
        "redaction_receipt_digest": redaction_receipt_digest,
        "score": normalize(score),  # an integral score is an int, as `normalize` has it
        "rank": rank,
    }


def packet_cost(packet: Mapping[str, JsonValue]) -> int:
    """Bytes a packet takes from the budget: the length of its JCS form.

    Raises:
        NonCanonicalValue: the packet is not canonical JSON.
    """
    return len(canonical_json(dict(packet)))


def take_page(
    packets: Iterable[Mapping[str, JsonValue] | None],
    *,
    offset: int,
    total: int,
    limit: int,
    budget: int,
) -> tuple[list[dict[str, JsonValue]], int | None]:
    """`take_page_json` without the packets' JCS bytes."""
    page, next_offset, _ = take_page_json(
        packets, offset=offset, total=total, limit=limit, budget=budget
    )
    return page, next_offset


def take_page_json(
    packets: Iterable[Mapping[str, JsonValue] | None],
    *,
    offset: int,
    total: int,
    limit: int,
    budget: int,
) -> tuple[list[dict[str, JsonValue]], int | None, list[bytes]]:
    """Fill one page from the packets of ranks `offset + 1 …`, in order.

    `packets` may be lazy: at most `limit` packets are drawn (one more is never needed), so
    the caller materializes only what the page can use. A None in their place is a record
    that dropped out when its page was materialized: it takes its rank and its place in the
    page's `limit`, and nothing back-fills it. `total` is the length of the whole ranked
    list. Returns the page, the offset of the next page (None when nothing remains) and
    each packet's JCS bytes, which its cost was measured on (the output is digested and
    measured from them, not serialized again: search/receipts.py `search_output_json`).

    Raises:
        ToolError: `PROJECTION_OVERSIZED` if the first packet alone exceeds the budget;
            `PROJECTION_STALE` if `packets` ends before `total` would have it end (a record
            was skipped, which must never pass silently).
        ValueError: `offset`, `total`, `limit` or `budget` is out of range.
        NonCanonicalValue: a packet is not canonical JSON.
    """
    if not 0 <= offset <= total or limit < 1 or budget < 1:
        raise ValueError("page bounds are out of range")
    page: list[dict[str, JsonValue]] = []
    page_json: list[bytes] = []
    used = 0
    taken = 0  # ranks consumed, dropped ones included
    wanted = min(limit, total - offset)
    iterator = iter(packets)
    while taken < wanted:
        try:
            packet = next(iterator)
        except StopIteration:
            raise ToolError(ErrorCode.PROJECTION_STALE, "fewer packets than ranked ids") from None
        if packet is None:
            taken += 1
            continue
        packet_json = canonical_json(dict(packet))
        cost = len(packet_json)
        if used + cost > budget:
            if not page:
                raise ToolError(ErrorCode.PROJECTION_OVERSIZED, "first packet over budget")
            break
        used += cost
        taken += 1
        page.append(dict(packet))
        page_json.append(packet_json)
    next_offset = offset + taken
    return page, (next_offset if next_offset < total else None), page_json
