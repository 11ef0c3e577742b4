"""Domain-separated digests and identifiers, byte-compatible with the reference engine (SPEC §9).

The domain strings keep the `graphify-memory/` prefix of the reference engine: those bytes are
persisted in digests that must keep verifying after the package rename.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Mapping

from engram_memory.contract.canonical import JsonValue, canonical_json

DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")  # fullmatch only
ZERO_DIGEST = "sha256:" + "0" * 64


def domain_digest(domain: str, value: JsonValue) -> str:
    """`D'(domain, v)`: sha256 over the domain bytes then the JCS bytes of `v`."""
    hasher = hashlib.sha256(domain.encode("utf-8"))
    hasher.update(canonical_json(value))
    return "sha256:" + hasher.hexdigest()


def kind_domain(kind: str, version: int = 1) -> str:
    return f"graphify-memory/{kind}/v{version}\0"


def digest(kind: str, body: Mapping[str, JsonValue], field: str = "receipt_digest") -> str:
    """`D(kind, body)`: the v1 domain digest of `body` without its own digest field."""
    return domain_digest(kind_domain(kind), {k: v for k, v in body.items() if k != field})


def with_digest(
    kind: str, body: Mapping[str, JsonValue], field: str = "receipt_digest"
) -> dict[str, JsonValue]:
    """Return `body` completed with its own `D(kind, body)` under `field`."""
    out = dict(body)
    out[field] = digest(kind, body, field)
    return out


PAYLOAD_FIELDS = (
    "schema_version",
    "scope_ref",
    "purpose_ref",
    "valid_time",
    "components",
    "primary_component_id",
    "primary_event",
    "citations",
    "retention",
    "reconciliation",
    "derivation",
)


def payload_digest(payload: Mapping[str, JsonValue]) -> str:
    body = {k: payload[k] for k in PAYLOAD_FIELDS if k in payload}
    return domain_digest(kind_domain("payload", 2), body)


def guard_digest(payload: Mapping[str, JsonValue]) -> str:
    """Forget-guard digest: the payload without retention and reconciliation (SPEC §9.2).

    A default TTL or a different family list must not let forgotten content back in.
    """
    body = {
        k: payload[k]
        for k in PAYLOAD_FIELDS
        if k in payload and k not in ("retention", "reconciliation")
    }
    return domain_digest(kind_domain("forget-guard"), body)


def record_digest(record_without_ids: Mapping[str, JsonValue]) -> str:
    """Digest of the record minus `record_id` and `record_digest` (SPEC §9.2)."""
    body = {k: v for k, v in record_without_ids.items() if k not in ("record_id", "record_digest")}
    return domain_digest(kind_domain("record", 2), body)


def record_id_for(record_digest_value: str) -> str:
    """`mem_` + lowercase unpadded RFC 4648 base32 of the 32 digest bytes (52 characters)."""
    raw = bytes.fromhex(record_digest_value.removeprefix("sha256:"))
    return "mem_" + base64.b32encode(raw).decode("ascii").rstrip("=").lower()


def candidate_id_for(source_ref: str, idempotency_key: str) -> str:
    """`candidate_` + the hex of D("capture-identity", …) with sequence "0" (SPEC §9.4)."""
    value = digest(
        "capture-identity",
        {"source_ref": source_ref, "sequence": "0", "idempotency_key": idempotency_key},
    )
    return "candidate_" + value.removeprefix("sha256:")


def sha256_hex(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def operation_digest(tool: str, arguments: Mapping[str, JsonValue]) -> str:
    """SPEC §6: `D("tool-operation", {tool, arguments})` over the normalized arguments as
    received (no defaults). Hosts compute it too, to bind a confirmation to exactly one call."""
    return digest("tool-operation", {"tool": tool, "arguments": dict(arguments)})


def operation_digest_of_json(tool: str, canonical_arguments: bytes) -> str:
    """`operation_digest(tool, arguments)` from the RFC 8785 bytes of the normalized
    arguments, serialized once when the call was decoded (contract/parsing.py). JCS orders
    `arguments` before `tool`, so the object's bytes are the two members around them."""
    hasher = hashlib.sha256(kind_domain("tool-operation").encode("utf-8"))
    hasher.update(b'{"arguments":')
    hasher.update(canonical_arguments)
    hasher.update(b',"tool":')
    hasher.update(canonical_json(tool))
    hasher.update(b"}")
    return "sha256:" + hasher.hexdigest()


@functools.lru_cache(maxsize=4096)
def one_way_ref(kind: str, value: str) -> str:
    """A stable one-way reference for identities and keys that must not be stored raw.

    Unkeyed on purpose: an auditor who knows a principal's id can find its entries.
    Remembered: a call asks for its principal's, agent's and session's a dozen times, and
    the same few identities make most calls (a pure function: bounded, exact).
    """
    return domain_digest(f"engram-memory/{kind}/v1\0", value)


def principal_ref(tenant: str, principal: str) -> str:
    """The hashed principal stored in audit entries and candidates."""
    return one_way_ref("principal", f"{tenant}\0{principal}")
