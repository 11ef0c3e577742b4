"""Rank receipt values and the search response digest (SPEC §4.1, §10.3)."""

from __future__ import annotations

from typing import Any

import pytest

from engram_memory.contract.digests import domain_digest
from engram_memory.search.ranking import profile_config_digest
from engram_memory.search.receipts import (
    SearchParameters,
    build_rank_receipt,
    candidate_ids_digest,
    ordered_ids_digest,
    request_digest,
    search_output,
)

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64
PARAMS = SearchParameters(
    query="postgres", purpose_ref="purpose:ops", limit=5, max_packet_bytes=8192
)


def _domain(kind: str) -> str:
    return f"graphify-memory/{kind}/v1\0"


def _receipt(candidates: list[str], ordered: list[str]) -> dict[str, Any]:
    return build_rank_receipt(
        params=PARAMS,
        valid_as_of=1_760_000_000_000,
        system_as_of="42",
        candidate_ids=candidates,
        ordered_ids=ordered,
        authorization_receipt_digest=A,
        snapshot_id="snapshot:42",
        snapshot_digest=B,
        revalidation_receipt_digest=A,
        projection_receipt_digests=[],
        issued_at="2026-01-01T00:00:00.000Z",
    )


def test_id_list_digests_use_their_own_domains() -> None:
    ids = ["mem_b", "mem_a"]
    assert candidate_ids_digest(ids) == domain_digest(
        _domain("recall-candidates"), {"candidate_ids": ids}
    )
    assert ordered_ids_digest(ids) == domain_digest(_domain("recall-ordered"), {"ordered_ids": ids})
    assert ordered_ids_digest(ids) != ordered_ids_digest(list(reversed(ids)))


def test_request_digest_fixes_max_candidates_at_2000() -> None:
    expected = domain_digest(
        _domain("recall-request"),
        {
            "query": "postgres",
            "purpose_ref": "purpose:ops",
            "profile": "offline_lexical_v1",
            "valid_as_of": 7,
            "system_as_of": "3",
            "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
            "budgets": {"max_candidates": 2000, "max_results": 5, "max_packet_bytes": 8192},
        },
    )
    assert (
        request_digest(PARAMS, profile="offline_lexical_v1", valid_as_of=7, system_as_of="3")
        == expected
    )


def test_rank_receipt_binds_counts_digests_and_its_own_digest() -> None:
    receipt = _receipt(["mem_c", "mem_a", "mem_b"], ["mem_c", "mem_b"])
    body = {k: v for k, v in receipt.items() if k != "receipt_digest"}
    assert receipt["receipt_digest"] == domain_digest(_domain("rank-receipt"), body)
    assert receipt["candidate_count"] == 3
    assert receipt["candidate_ids_digest"] == candidate_ids_digest(["mem_c", "mem_a", "mem_b"])
    assert receipt["ordered_ids_digest"] == ordered_ids_digest(["mem_c", "mem_b"])
    assert receipt["profile_config_digest"] == profile_config_digest()
    assert receipt["profile"] == "offline_lexical_v1"
    assert receipt["profile_version"] == "1.0.0"
    assert receipt["scoring_formula_ref"] == "graphify-memory:offline-lexical-recency:v1"
    assert receipt["request_digest"] == request_digest(
        PARAMS, profile="offline_lexical_v1", valid_as_of=1_760_000_000_000, system_as_of="42"
    )
    assert set(receipt) == {
        "request_digest", "authorization_receipt_digest", "profile", "profile_version",
        "profile_config_digest", "valid_as_of", "system_as_of", "snapshot_id", "snapshot_digest",
        "candidate_count", "candidate_ids_digest", "scoring_formula_ref", "ordered_ids_digest",
        "revalidation_receipt_digest", "projection_receipt_digests", "issued_at", "receipt_digest",
    }  # fmt: skip


def test_zero_match_receipt_is_complete() -> None:
    receipt = _receipt([], [])
    assert receipt["candidate_count"] == 0
    assert receipt["ordered_ids_digest"] == ordered_ids_digest([])


@pytest.mark.parametrize(
    "ordered",
    [["mem_b", "mem_a"], ["mem_a", "mem_z"], ["mem_a", "mem_a"]],
    ids=["reorder", "backfill", "repeat"],
)
def test_revalidation_may_only_drop_ids(ordered: list[str]) -> None:
    with pytest.raises(ValueError, match="subsequence"):
        _receipt(["mem_a", "mem_b"], ordered)


def test_response_digest_covers_records_receipt_and_cursor() -> None:
    receipt = _receipt(["mem_a"], ["mem_a"])
    records = [
        {
            "record": {"record_id": "mem_a"},
            "redacted_fields": [],
            "redaction_receipt_digest": A,
            "score": 0.5,
            "rank": 1,
        }
    ]
    final = search_output(records, receipt, None)
    assert "next_page_cursor" not in final
    assert final["response_digest"] == domain_digest(
        _domain("recall-packet"), {"records": records, "rank_receipt": receipt}
    )
    paged = search_output(records, receipt, "cursor")
    assert paged["next_page_cursor"] == "cursor"
    assert paged["response_digest"] == domain_digest(
        _domain("recall-packet"),
        {"records": records, "rank_receipt": receipt, "next_page_cursor": "cursor"},
    )
