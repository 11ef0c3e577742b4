"""Rank receipt, its component digests and the search response digest (SPEC §4.1, §10.3).

Everything the search computation cannot know (authorization, snapshot, revalidation,
projections, issue time) comes in as parameters; this module only fixes the shapes and the
digest domains so every caller produces byte-identical receipts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_memory.contract.canonical import JsonValue, normalize
from engram_memory.contract.digests import digest, with_digest
from engram_memory.search.ranking import (
    MAX_CANDIDATES,
    PROFILE,
    PROFILE_VERSION,
    SCORING_FORMULA_REF,
    profile_config_digest,
)

DEFAULT_LIMIT = 10
DEFAULT_MAX_PACKET_BYTES = 65_536


def _default_capability_policy() -> dict[str, str]:
    return {"minimum_channels": "lexical", "network": "forbid"}


@dataclass(frozen=True, slots=True)
class SearchParameters:
    """The effective (defaults applied) search arguments a continuation must repeat.

    They feed both `request_digest` and the page-cursor binding; `page_cursor` itself is
    not one of them.
    """

    query: str
    purpose_ref: str
    limit: int = DEFAULT_LIMIT
    max_packet_bytes: int = DEFAULT_MAX_PACKET_BYTES
    capability_policy: Mapping[str, str] = field(default_factory=_default_capability_policy)


def candidate_ids_digest(candidate_ids: Sequence[str]) -> str:
    """`D("recall-candidates", {candidate_ids})` over the ranked list before revalidation.

    Raises:
        NonCanonicalValue: an id is not canonical JSON (unpaired surrogate).
    """
    return digest("recall-candidates", {"candidate_ids": normalize(list(candidate_ids))})


def ordered_ids_digest(ordered_ids: Sequence[str]) -> str:
    """`D("recall-ordered", {ordered_ids})` over the revalidated list; pinned in page cursors.

    Raises:
        NonCanonicalValue: an id is not canonical JSON (unpaired surrogate).
    """
    return digest("recall-ordered", {"ordered_ids": normalize(list(ordered_ids))})


def request_digest(
    params: SearchParameters, *, profile: str, valid_as_of: int, system_as_of: str
) -> str:
    """`D("recall-request", …)` with `budgets.max_candidates` fixed at 2,000.

    Raises:
        NonCanonicalValue: a parameter is not canonical JSON.
    """
    body = {
        "query": params.query,
        "purpose_ref": params.purpose_ref,
        "profile": profile,
        "valid_as_of": valid_as_of,
        "system_as_of": system_as_of,
        "capability_policy": dict(params.capability_policy),
        "budgets": {
            "max_candidates": MAX_CANDIDATES,
            "max_results": params.limit,
            "max_packet_bytes": params.max_packet_bytes,
        },
    }
    return digest("recall-request", normalize(body))


def _is_subsequence(short: Sequence[str], long: Sequence[str]) -> bool:
    remaining = iter(long)
    return all(any(item == other for other in remaining) for item in short)


def build_rank_receipt(
    *,
    params: SearchParameters,
    valid_as_of: int,
    system_as_of: str,
    candidate_ids: Sequence[str],
    ordered_ids: Sequence[str],
    authorization_receipt_digest: str,
    snapshot_id: str,
    snapshot_digest: str,
    revalidation_receipt_digest: str,
    projection_receipt_digests: Sequence[str],
    issued_at: str,
    profile: str = PROFILE,
    profile_version: str = PROFILE_VERSION,
    scoring_formula_ref: str = SCORING_FORMULA_REF,
    config_digest: str | None = None,
    ordered_digest: str | None = None,
) -> dict[str, JsonValue]:
    """Assemble the rank receipt and seal it with `receipt_digest` (`rank-receipt`).

    `candidate_ids` is the ranked list before revalidation, `ordered_ids` the revalidated
    list; `config_digest` defaults to the offline profile's configuration digest;
    `ordered_digest`, when the caller computed `ordered_ids_digest(ordered_ids)` already.

    Raises:
        ValueError: `ordered_ids` is not a subsequence of `candidate_ids` (revalidation may
            only drop ids, never add or reorder them).
        NonCanonicalValue: a value is not canonical JSON.
    """
    same = ordered_ids is candidate_ids  # nothing dropped: one list, one check less
    if not same and not _is_subsequence(ordered_ids, candidate_ids):
        raise ValueError("revalidated ids must be a subsequence of the candidates")
    ordered = ordered_ids_digest(ordered_ids) if ordered_digest is None else ordered_digest
    body: dict[str, Any] = {
        "request_digest": request_digest(
            params, profile=profile, valid_as_of=valid_as_of, system_as_of=system_as_of
        ),
        "authorization_receipt_digest": authorization_receipt_digest,
        "profile": profile,
        "profile_version": profile_version,
        "profile_config_digest": config_digest or profile_config_digest(),
        "valid_as_of": valid_as_of,
        "system_as_of": system_as_of,
        "snapshot_id": snapshot_id,
        "snapshot_digest": snapshot_digest,
        "candidate_count": len(candidate_ids),
        "candidate_ids_digest": candidate_ids_digest(candidate_ids),
        "scoring_formula_ref": scoring_formula_ref,
        "ordered_ids_digest": ordered,
        "revalidation_receipt_digest": revalidation_receipt_digest,
        "projection_receipt_digests": list(projection_receipt_digests),
        "issued_at": issued_at,
    }
    return with_digest("rank-receipt", normalize(body))


def search_output(
    records: Sequence[Mapping[str, JsonValue]],
    rank_receipt: Mapping[str, JsonValue],
    next_page_cursor: str | None,
) -> dict[str, JsonValue]:
    """The search tool output with `response_digest = D("recall-packet", {…})`.

    `next_page_cursor` is omitted, never null, when no records remain.

    Raises:
        NonCanonicalValue: a value is not canonical JSON.
    """
    body: dict[str, Any] = {"records": list(records), "rank_receipt": dict(rank_receipt)}
    if next_page_cursor is not None:
        body["next_page_cursor"] = next_page_cursor
    body = normalize(body)
    return {**body, "response_digest": digest("recall-packet", body)}
