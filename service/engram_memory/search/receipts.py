"""Rank receipt, its component digests and the search response digest (SPEC §4.1, §10.3).

Everything the search computation cannot know (authorization, snapshot, revalidation,
projections, issue time) comes in as parameters; this module only fixes the shapes and the
digest domains so every caller produces byte-identical receipts.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_memory.contract.canonical import JsonValue, canonical_json, normalize
from engram_memory.contract.digests import digest, kind_domain, with_digest
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


def digest_of_json(kind: str, *parts: bytes) -> str:
    """`D(kind, body)` from the JCS bytes of `body` (without its own digest field), given in
    consecutive parts: for a caller that needs those bytes anyway (a length, a composition)."""
    hasher = hashlib.sha256(kind_domain(kind).encode("utf-8"))
    for part in parts:
        hasher.update(part)
    return "sha256:" + hasher.hexdigest()


@dataclass(frozen=True)
class RankedIdsJson:
    """A ranked id list serialized once (JCS) for the three digests that bind it: a page of
    a 10k store can rank thousands of ids, and each digest would otherwise normalize and
    serialize the whole list again."""

    ids_json: bytes

    @classmethod
    def of(cls, ids: Sequence[str]) -> RankedIdsJson:
        """Raises: NonCanonicalValue: an id is not canonical JSON (unpaired surrogate)."""
        return cls(canonical_json(normalize(list(ids))))

    def candidates_digest(self) -> str:
        """= `candidate_ids_digest(ids)`."""
        return digest_of_json("recall-candidates", b'{"candidate_ids":', self.ids_json, b"}")

    @functools.cached_property
    def ordered_digest(self) -> str:
        """= `ordered_ids_digest(ids)` (pinned in page cursors and bound by the receipt)."""
        return digest_of_json("recall-ordered", b'{"ordered_ids":', self.ids_json, b"}")

    def revalidation_digest(self, valid_as_of: int, system_as_of: str, checked_at: str) -> str:
        """= `D("recall-revalidation", {record_ids: ids, valid_as_of, system_as_of,
        checked_at})` (tools/reading.py `revalidation_receipt_digest`); keys in JCS order."""
        return digest_of_json(
            "recall-revalidation",
            b'{"checked_at":',
            canonical_json(normalize(checked_at)),
            b',"record_ids":',
            self.ids_json,
            b',"system_as_of":',
            canonical_json(normalize(system_as_of)),
            b',"valid_as_of":',
            canonical_json(normalize(valid_as_of)),
            b"}",
        )


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
    candidates_digest: str | None = None,
) -> dict[str, JsonValue]:
    """Assemble the rank receipt and seal it with `receipt_digest` (`rank-receipt`).

    `candidate_ids` is the ranked list before revalidation, `ordered_ids` the revalidated
    list; `config_digest` defaults to the offline profile's configuration digest;
    `ordered_digest` and `candidates_digest`, when the caller computed
    `ordered_ids_digest(ordered_ids)` and `candidate_ids_digest(candidate_ids)` already.

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
        "candidate_ids_digest": (
            candidate_ids_digest(candidate_ids) if candidates_digest is None else candidates_digest
        ),
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


def search_output_json(
    records_json: Sequence[bytes],
    records: Sequence[Mapping[str, JsonValue]],
    rank_receipt: Mapping[str, JsonValue],
    next_page_cursor: str | None,
) -> tuple[dict[str, JsonValue], bytes]:
    """`search_output`, and its JCS bytes, from the JCS bytes of each record packet (those
    `take_page_json` measured), so the page is not normalized and serialized twice more.

    The output's members are composed in JCS order (`next_page_cursor`, `rank_receipt`,
    `records`, `response_digest`: ASCII keys, code point order); the records must be
    normalized packets (search/packets.py `search_packet` builds them so).

    Raises:
        NonCanonicalValue: the receipt or the cursor is not canonical JSON.
    """
    receipt = normalize(dict(rank_receipt))
    head = b"{"
    if next_page_cursor is not None:
        head += b'"next_page_cursor":' + canonical_json(normalize(next_page_cursor)) + b","
    body_json = b"".join(
        (
            head,
            b'"rank_receipt":',
            canonical_json(receipt),
            b',"records":[',
            b",".join(records_json),
            b"]}",
        )
    )
    response_digest = digest_of_json("recall-packet", body_json)
    output: dict[str, JsonValue] = {}
    if next_page_cursor is not None:
        output["next_page_cursor"] = next_page_cursor
    output.update(
        {
            "rank_receipt": receipt,
            "records": [dict(r) for r in records],
            "response_digest": response_digest,
        }
    )
    output_json = body_json[:-1] + b',"response_digest":' + canonical_json(response_digest) + b"}"
    return output, output_json
