"""The search output serialized once (issue 20 item 3): the digests and lengths composed from
each packet's JCS bytes and the ranked list's are exactly those of serializing it whole."""

from __future__ import annotations

from typing import Any

import pytest

from engram_memory.contract.canonical import canonical_json, normalize
from engram_memory.contract.envelope import success_envelope
from engram_memory.search.packets import search_packet, take_page_json
from engram_memory.search.receipts import (
    RankedIdsJson,
    candidate_ids_digest,
    ordered_ids_digest,
    search_output,
    search_output_json,
)
from engram_memory.tools.reading import AsOf, revalidation_receipt_digest

D = "sha256:" + "c" * 64
IDS = ["mem_a", "mem_é", "mem_\U0001f600", "mem_\uffff"]


def _record(n: int) -> dict[str, Any]:
    # Keys whose JCS order (UTF-16 units) differs from code point order, numbers of each kind.
    return normalize(
        {
            "record_id": f"mem_{n}",
            "\U0001f600": "astral",
            "\uffff": "bmp",
            "text": "Ünïcödé ✓ " * n,
            "numbers": [1, 2.5, 1e-7, 10.0, -3],
        }
    )


@pytest.mark.parametrize("cursor", [None, "cursor-é"])
@pytest.mark.parametrize("score", [0.8125, 1.0, 0.0, 3e-5])
def test_the_composed_output_is_the_output_serialized_whole(
    cursor: str | None, score: float
) -> None:
    packets = [search_packet(_record(n), ["/derivation"], D, score, n) for n in (1, 2, 3)]
    page, _, page_json = take_page_json(packets, offset=0, total=3, limit=3, budget=1_000_000)
    receipt = normalize({"receipt_digest": D, "candidate_count": 3, "score": 0.5})

    output, output_json = search_output_json(page_json, page, receipt, cursor)

    expected = search_output(page, receipt, cursor)
    assert output == expected
    assert output_json == canonical_json(normalize(expected))
    around = canonical_json(success_envelope({}, "audit:x"))
    whole = canonical_json(normalize(success_envelope(expected, "audit:x")))
    assert len(around) - len(b"{}") + len(output_json) == len(whole)


@pytest.mark.parametrize("ids", [[], IDS, [f"mem_{n:05d}" for n in range(2000)]])
def test_the_ranked_list_serialized_once_gives_its_three_digests(ids: list[str]) -> None:
    composed = RankedIdsJson.of(ids)
    as_of = AsOf(1_760_000_000_000, 42)

    assert composed.ordered_digest == ordered_ids_digest(ids)
    assert composed.candidates_digest() == candidate_ids_digest(ids)
    assert composed.revalidation_digest(
        as_of.valid_as_of, str(as_of.system_as_of), "2026-12-07T20:00:00.000Z"
    ) == revalidation_receipt_digest(ids, as_of, "2026-12-07T20:00:00.000Z")
