"""Search page cursors: the reference form plus a server MAC (SPEC §9.6).

A cursor is `base64url_nopad(JCS({profile, valid_as_of, system_as_of, offset,
ordered_ids_digest, mac}))`. The MAC covers the five pinned fields and a `binding` digest of
the effective request (scope, principal, query, purpose, limit, budget, capability policy)
that is recomputed from the continuation and never stored, so a cursor replayed under
another scope, principal or query fails verification without revealing why. Every failure
is the same `STALE_PAGE`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any

from engram_memory.contract.canonical import SAFE_INTEGER_MAX, JsonValue, canonical_json, normalize
from engram_memory.contract.digests import DIGEST_PATTERN, digest
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import NonCanonicalValue, ToolError
from engram_memory.search.receipts import SearchParameters

PROFILES = frozenset({"offline_lexical_v1", "semantic_v1"})
MAX_CURSOR_BYTES = 512
MIN_SECRET_BYTES = 32
_U64_MAX = 2**64 - 1

_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")  # each used with fullmatch
_JOURNAL_CURSOR = re.compile(r"0|[1-9][0-9]*")
_MAC = re.compile(r"[0-9a-f]{64}")
_KEYS = frozenset({"profile", "valid_as_of", "system_as_of", "offset", "ordered_ids_digest", "mac"})


@dataclass(frozen=True, slots=True)
class PageCursorFields:
    """The pinned continuation state a cursor carries (everything but the MAC)."""

    profile: str
    valid_as_of: int
    system_as_of: str
    offset: int
    ordered_ids_digest: str

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "profile": self.profile,
            "valid_as_of": self.valid_as_of,
            "system_as_of": self.system_as_of,
            "offset": self.offset,
            "ordered_ids_digest": self.ordered_ids_digest,
        }


def page_binding(params: SearchParameters, *, scope_ref: str, principal: str) -> str:
    """`D("page-binding", {scope_ref, principal, query, purpose_ref, limit, max_packet_bytes,
    capability_policy})` over effective values.

    Raises:
        NonCanonicalValue: a value is not canonical JSON.
    """
    body = {
        "scope_ref": scope_ref,
        "principal": principal,
        "query": params.query,
        "purpose_ref": params.purpose_ref,
        "limit": params.limit,
        "max_packet_bytes": params.max_packet_bytes,
        "capability_policy": dict(params.capability_policy),
    }
    return digest("page-binding", normalize(body))


def _is_safe_nonnegative(value: object) -> bool:
    # bool is an int subclass; JSON `true` must not pass as 1.
    return type(value) is int and 0 <= value <= SAFE_INTEGER_MAX


def _valid_fields(fields: PageCursorFields) -> bool:
    return (
        isinstance(fields.profile, str)
        and fields.profile in PROFILES
        and _is_safe_nonnegative(fields.valid_as_of)
        and isinstance(fields.system_as_of, str)
        and _JOURNAL_CURSOR.fullmatch(fields.system_as_of) is not None
        and int(fields.system_as_of) <= _U64_MAX
        # A cursor exists only when a page took at least one packet and records remain.
        and _is_safe_nonnegative(fields.offset)
        and fields.offset >= 1
        and isinstance(fields.ordered_ids_digest, str)
        and DIGEST_PATTERN.fullmatch(fields.ordered_ids_digest) is not None
    )


def _check_keys(binding: str, secret: bytes) -> None:
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError("page cursor secret must be at least 32 bytes")
    if DIGEST_PATTERN.fullmatch(binding) is None:
        raise ValueError("page binding must be a digest")


def _mac(fields: PageCursorFields, binding: str, secret: bytes) -> str:
    signed = canonical_json({**fields.as_json(), "binding": binding})
    return hmac.new(secret, signed, hashlib.sha256).hexdigest()


def encode_page_cursor(fields: PageCursorFields, binding: str, secret: bytes) -> str:
    """Encode and MAC a continuation cursor.

    Raises:
        ValueError: the fields are out of shape, `binding` is not a digest, the secret is
            shorter than 32 bytes, or the cursor would exceed 512 bytes.
    """
    _check_keys(binding, secret)
    if not _valid_fields(fields):
        raise ValueError("page cursor fields are out of shape")
    body = {**fields.as_json(), "mac": _mac(fields, binding, secret)}
    cursor = base64.urlsafe_b64encode(canonical_json(body)).rstrip(b"=").decode("ascii")
    if len(cursor) > MAX_CURSOR_BYTES:
        raise ValueError("page cursor exceeds 512 bytes")
    return cursor


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError("non-finite number")


def _parse(cursor: object) -> tuple[PageCursorFields, str] | None:
    """Decode without trusting anything; None for any defect."""
    if not isinstance(cursor, str) or not 1 <= len(cursor) <= MAX_CURSOR_BYTES:
        return None
    # Base64 without padding never has length ≡ 1 (mod 4).
    if _BASE64URL.fullmatch(cursor) is None or len(cursor) % 4 == 1:
        return None
    raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    # Only the canonical encoding is accepted: stray trailing bits would otherwise give many
    # strings for one cursor, and the contract says cursors are copied exactly.
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != cursor:
        return None
    value = json.loads(
        raw.decode("utf-8"),
        object_pairs_hook=_reject_duplicates,
        parse_constant=_reject_constant,
    )
    if not isinstance(value, dict) or set(value) != _KEYS:
        return None
    mac = value["mac"]
    if not isinstance(mac, str) or _MAC.fullmatch(mac) is None:
        return None
    fields = PageCursorFields(
        profile=value["profile"],
        valid_as_of=value["valid_as_of"],
        system_as_of=value["system_as_of"],
        offset=value["offset"],
        ordered_ids_digest=value["ordered_ids_digest"],
    )
    if not _valid_fields(fields):
        return None
    # The server only ever emits JCS; any other serialization of the same object was not
    # produced by us.
    if canonical_json(value) != raw:
        return None
    return fields, mac


def decode_page_cursor(cursor: str, binding: str, secret: bytes) -> PageCursorFields:
    """Verify a cursor against the recomputed `binding` and return its pinned fields.

    The caller must still re-rank at the pinned pair and profile and call
    `require_same_ordering`.

    Raises:
        ToolError: `STALE_PAGE` for any defect: bad base64, bad or non-canonical JSON,
            wrong shape or types, or a MAC that does not verify (tamper, other binding,
            rotated secret).
        ValueError: the server's own `binding` or secret is unusable (not a cursor defect).
    """
    _check_keys(binding, secret)
    try:
        parsed = _parse(cursor)
    except (ValueError, TypeError, RecursionError, NonCanonicalValue, binascii.Error):
        parsed = None
    if parsed is None:
        raise ToolError(ErrorCode.STALE_PAGE, "page cursor malformed")
    fields, mac = parsed
    if not hmac.compare_digest(mac, _mac(fields, binding, secret)):
        raise ToolError(ErrorCode.STALE_PAGE, "page cursor mac mismatch")
    return fields


def require_same_ordering(
    fields: PageCursorFields, *, ordered_ids_digest: str, ordered_count: int
) -> None:
    """Check a re-ranked list against the cursor: same ordered ids, offset still inside.

    Raises:
        ToolError: `STALE_PAGE` if the revalidated list changed or no longer reaches the
            cursor's offset.
    """
    if fields.ordered_ids_digest != ordered_ids_digest or fields.offset >= ordered_count:
        raise ToolError(ErrorCode.STALE_PAGE, "ordered list changed")
