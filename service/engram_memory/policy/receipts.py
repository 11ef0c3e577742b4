"""Typed policy decisions, and minting the receipts that bind them to a bundle
(the receipt's shape is in contract/receipts.py).

A receipt proves which policy (path), which bundle (content digest AND revision), which engine
decided what (result digest) about what (input digest), and why (`reasons`, the rules that
fired). An auditor re-derives `receipt_digest` without the service.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engram_memory.contract.canonical import JsonValue, canonical_json, normalize
from engram_memory.contract.receipts import (
    DecisionReceipt,
    input_digest_of_json,
    receipt_digest_of,
    result_digest_of_json,
)


@dataclass(frozen=True)
class Decision:
    """A policy result (the entrypoint's object) and its receipt."""

    path: str
    result: Mapping[str, Any]
    receipt: DecisionReceipt
    # What was decided about (ids, digests and classifier names only): kept for policy
    # replay when the operator says so (store/decision_inputs.py); the receipt binds it.
    policy_input: Mapping[str, Any] = field(default_factory=dict)
    # The RFC 8785 text of the normalized input and result, as the receipt digested them
    # (None: not serialized yet): a kept decision stores exactly these, never re-serialized.
    input_json: str | None = None
    result_json: str | None = None

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.receipt.reasons


def make_receipt(
    *,
    policy_path: str,
    policy_input: Mapping[str, Any],
    result: Mapping[str, Any],
    bundle_revision: str,
    bundle_digest: str,
    engine_id: str,
    engine_version: str,
    decided_at_ms: int,
) -> DecisionReceipt:
    """Build and digest a receipt for one evaluation."""
    return mint_receipt(
        policy_path=policy_path,
        input_json=canonical_json(normalize(dict(policy_input))),
        result=result,
        result_json=canonical_json(normalize(dict(result))),
        bundle_revision=bundle_revision,
        bundle_digest=bundle_digest,
        engine_id=engine_id,
        engine_version=engine_version,
        decided_at_ms=decided_at_ms,
    )


def mint_receipt(
    *,
    policy_path: str,
    input_json: bytes,
    result: Mapping[str, Any],
    result_json: bytes,
    bundle_revision: str,
    bundle_digest: str,
    engine_id: str,
    engine_version: str,
    decided_at_ms: int,
) -> DecisionReceipt:
    """`make_receipt` from the RFC 8785 bytes of the normalized input and result, serialized
    once by the caller (policy/decider.py keeps them with the decision)."""
    reasons_value = result.get("reasons", [])
    reasons = (
        tuple(sorted(str(r) for r in reasons_value)) if isinstance(reasons_value, list) else ()
    )
    body: dict[str, JsonValue] = {
        "decision_id": "dec_" + uuid.uuid4().hex,
        "policy_path": policy_path,
        "input_digest": input_digest_of_json(input_json),
        "result_digest": result_digest_of_json(result_json),
        "bundle_revision": bundle_revision,
        "bundle_digest": bundle_digest,
        "engine_id": engine_id,
        "engine_version": engine_version,
        "reasons": list(reasons),
        "decided_at_ms": decided_at_ms,
    }
    return DecisionReceipt(
        decision_id=str(body["decision_id"]),
        policy_path=policy_path,
        input_digest=str(body["input_digest"]),
        result_digest=str(body["result_digest"]),
        bundle_revision=bundle_revision,
        bundle_digest=bundle_digest,
        engine_id=engine_id,
        engine_version=engine_version,
        reasons=reasons,
        decided_at_ms=decided_at_ms,
        receipt_digest=receipt_digest_of(body),
    )
