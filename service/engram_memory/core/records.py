"""Building the future record at capture and rebuilding it at admission (SPEC §9.3, §11).

Acceptance must rebuild byte-identical bytes from the sealed envelope, so both paths go through
the same functions here.
"""

from __future__ import annotations

from collections.abc import Mapping

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import (
    digest,
    payload_digest,
    record_digest,
    record_id_for,
)

ASSERTED_VERIFIER_ID = "graphify-memory:asserted"
DEFAULT_RETENTION: dict[str, JsonValue] = {"derivative_rule": "make-ineligible"}
DEFAULT_RECONCILIATION: dict[str, JsonValue] = {"family_refs": []}


def effective_payload(
    payload: Mapping[str, JsonValue], scope_ref: str, expires_at: str | None
) -> dict[str, JsonValue]:
    """NFC payload + host scope + defaults, resolved once (SPEC §4.3 "Processing")."""
    effective = dict(payload)
    effective["scope_ref"] = scope_ref
    retention = dict(payload.get("retention") or DEFAULT_RETENTION)
    if expires_at is not None:
        retention["expires_at"] = expires_at
    effective["retention"] = retention
    effective.setdefault("reconciliation", dict(DEFAULT_RECONCILIATION))
    return effective


def asserted_trust(
    evidence_digest: str, issued_at: str, payload_digest_value: str
) -> dict[str, JsonValue]:
    """The reference trust binding when no verifier checked the evidence (SPEC §11)."""
    body: dict[str, JsonValue] = {
        "class": "asserted",
        "evidence_digest": evidence_digest,
        "verifier_id": ASSERTED_VERIFIER_ID,
        "verifier_version": "1",
        "issued_at": issued_at,
        "revocation_epoch": "0",
    }
    body["receipt_digest"] = digest(
        "asserted-trust", {**body, "payload_digest": payload_digest_value}
    )
    return body


def build_record(
    effective: Mapping[str, JsonValue],
    *,
    recorded_at: str,
    recorded_cursor: str,
    authorization_receipt_digest: str,
    trust: Mapping[str, JsonValue],
    payload_digest_value: str | None = None,
) -> dict[str, JsonValue]:
    """The full record: payload + writer fields + record_digest + record_id.
    `payload_digest_value`: `effective`'s payload digest when the caller already made it
    (a capture makes it for its trust binding): not serialized again."""
    record: dict[str, JsonValue] = dict(effective)
    record["payload_digest"] = payload_digest_value or payload_digest(effective)
    record["recorded_at"] = recorded_at
    record["recorded_cursor"] = recorded_cursor
    record["authorization_receipt_digest"] = authorization_receipt_digest
    record["trust"] = dict(trust)
    record["record_digest"] = record_digest(record)
    record["record_id"] = record_id_for(str(record["record_digest"]))
    return record
