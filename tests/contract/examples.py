"""Valid argument sets for the six tools, for any test that needs a call that passes the contract.

Each builder returns a fresh, JSON-shaped dict (safe to mutate). Keyword arguments override the
most commonly varied fields.
"""

from __future__ import annotations

from typing import Any

PURPOSE = "purpose:case"
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
RECORD_ID = "mem_y5lyhrr2w42rak7rz6h3gypy53rhohj2zszdhj7gpqzvjnijiqkq"
CANDIDATE_ID = "candidate_" + "0123456789abcdef" * 4
IDEMPOTENCY_KEY = "key-0000000000000001"
INSTANT = "2026-08-16T12:34:56.789Z"
EPOCH_MS = 1755350096789


def valid_search_arguments(
    query: str = "documented correction", **overrides: Any
) -> dict[str, Any]:
    return {"query": query, "purpose_ref": PURPOSE, **overrides}


def valid_get_arguments(record_id: str = RECORD_ID, **overrides: Any) -> dict[str, Any]:
    return {"record_id": record_id, "purpose_ref": PURPOSE, **overrides}


def valid_capture_payload(
    text: str = "Applied the documented correction.", **overrides: Any
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "schema_version": 2,
        "purpose_ref": PURPOSE,
        "valid_time": {"t": EPOCH_MS, "t_end": EPOCH_MS},
        "components": [
            {
                "component_id": "component:decision",
                "kind": "decision",
                "text": text,
                "citation_ids": ["citation:source"],
            }
        ],
        "primary_component_id": "component:decision",
        "primary_event": {
            "at": EPOCH_MS,
            "type_ref": "event:correction-applied",
            "citation_id": "citation:source",
        },
        "citations": [
            {
                "citation_id": "citation:source",
                "source_ref": "source:case",
                "locator": {"scheme": "document", "value": "case-7#correction"},
                "content_digest": DIGEST_A,
                "observed_at": INSTANT,
            }
        ],
    }
    payload.update(overrides)
    return payload


def valid_evidence(**overrides: Any) -> dict[str, Any]:
    return {
        "evidence_ref": "evidence:ticket-7",
        "evidence_digest": DIGEST_B,
        "citation_ids": ["citation:source"],
        **overrides,
    }


def valid_capture_arguments(
    text: str = "Applied the documented correction.",
    idempotency_key: str = IDEMPOTENCY_KEY,
    **payload_overrides: Any,
) -> dict[str, Any]:
    return {
        "idempotency_key": idempotency_key,
        "payload": valid_capture_payload(text, **payload_overrides),
        "evidence": valid_evidence(),
    }


def full_capture_arguments() -> dict[str, Any]:
    """A capture using every optional field."""
    args = valid_capture_arguments()
    payload = args["payload"]
    payload["components"].append(
        {
            "component_id": "component:context",
            "kind": "context",
            "text": "Case 7 had a typo in the invoice total.",
            "citation_ids": ["citation:source", "citation:ticket"],
        }
    )
    payload["citations"].append(
        {
            "citation_id": "citation:ticket",
            "source_ref": "source:ticket",
            "locator": {"scheme": "ticket", "value": "T-7"},
            "content_digest": DIGEST_B,
        }
    )
    payload["retention"] = {"derivative_rule": "make-ineligible", "expires_at": INSTANT}
    payload["reconciliation"] = {"family_refs": ["family:a", "family:b"]}
    args["evidence"]["attestation"] = "Checked against the ticket by the reviewer."
    args["evidence"]["citation_ids"] = ["citation:source", "citation:ticket"]
    return args


def valid_request_admission_arguments(candidate_id: str = CANDIDATE_ID) -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": IDEMPOTENCY_KEY}


def valid_withdraw_arguments(candidate_id: str = CANDIDATE_ID) -> dict[str, Any]:
    return {
        "candidate_id": candidate_id,
        "idempotency_key": IDEMPOTENCY_KEY,
        "reason_ref": "reason:superseded-by-ticket",
    }


def valid_forget_arguments(record_id: str = RECORD_ID) -> dict[str, Any]:
    return {
        "record_id": record_id,
        "idempotency_key": IDEMPOTENCY_KEY,
        "reason_ref": "reason:subject-request",
    }


VALID_ARGUMENTS = {
    "engram_memory_search": valid_search_arguments,
    "engram_memory_get": valid_get_arguments,
    "engram_memory_capture": valid_capture_arguments,
    "engram_memory_request_admission": valid_request_admission_arguments,
    "engram_memory_withdraw": valid_withdraw_arguments,
    "engram_memory_forget": valid_forget_arguments,
}
