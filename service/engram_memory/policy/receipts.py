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

from engram_memory.contract.canonical import JsonValue, normalize
from engram_memory.contract.receipts import (
    DecisionReceipt,
    input_digest_of,
    receipt_digest_of,
    result_digest_of,
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
    reasons_value = result.get("reasons", [])
    reasons = (
        tuple(sorted(str(r) for r in reasons_value)) if isinstance(reasons_value, list) else ()
    )
    body: dict[str, JsonValue] = {
        "decision_id": "dec_" + uuid.uuid4().hex,
        "policy_path": policy_path,
        "input_digest": input_digest_of(normalize(dict(policy_input))),
        "result_digest": result_digest_of(normalize(dict(result))),
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
