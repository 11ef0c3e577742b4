"""The shape of a policy decision receipt, shared by the policy engines that mint it and the
audit trail that stores it (store/audit.py), so neither adapter imports the other.

A receipt proves which policy (path), which bundle (content digest AND revision), which engine
decided what (result digest) about what (input digest), and why (`reasons`, the rules that
fired). An auditor re-derives `receipt_digest` without the service.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import digest, kind_domain

RECEIPT_KIND = "policy-decision"


@dataclass(frozen=True)
class DecisionReceipt:
    decision_id: str
    policy_path: str
    input_digest: str
    result_digest: str
    bundle_revision: str
    bundle_digest: str
    engine_id: str
    engine_version: str
    reasons: tuple[str, ...]
    decided_at_ms: int
    receipt_digest: str

    def body(self) -> dict[str, JsonValue]:
        return {
            "decision_id": self.decision_id,
            "policy_path": self.policy_path,
            "input_digest": self.input_digest,
            "result_digest": self.result_digest,
            "bundle_revision": self.bundle_revision,
            "bundle_digest": self.bundle_digest,
            "engine_id": self.engine_id,
            "engine_version": self.engine_version,
            "reasons": list(self.reasons),
            "decided_at_ms": self.decided_at_ms,
        }


def receipt_digest_of(body: Mapping[str, JsonValue]) -> str:
    return digest(RECEIPT_KIND, body)


def input_digest_of(policy_input: JsonValue) -> str:
    """A receipt's `input_digest` of a normalized decision input: minted with the receipt
    (policy/receipts.py) and re-derived from a kept input (store/decision_inputs.py)."""
    return digest("policy-input", {"input": policy_input})


def result_digest_of(result: JsonValue) -> str:
    """A receipt's `result_digest` of a normalized decision result (as `input_digest_of`)."""
    return digest("policy-result", {"result": result})


# JCS of a one-member object is the member's name and its value's JCS between braces, so a
# digest over `{"input": v}` needs only the bytes of `v`: a decision serializes its input and
# result once, for these digests and for the kept decision (core/decision_keeping.py).
_INPUT_PREFIX = kind_domain("policy-input").encode("utf-8") + b'{"input":'
_RESULT_PREFIX = kind_domain("policy-result").encode("utf-8") + b'{"result":'


def input_digest_of_json(canonical_input: bytes) -> str:
    """`input_digest_of(v)` from the RFC 8785 bytes of the normalized `v`."""
    return "sha256:" + hashlib.sha256(_INPUT_PREFIX + canonical_input + b"}").hexdigest()


def result_digest_of_json(canonical_result: bytes) -> str:
    """`result_digest_of(v)` from the RFC 8785 bytes of the normalized `v`."""
    return "sha256:" + hashlib.sha256(_RESULT_PREFIX + canonical_result + b"}").hexdigest()
