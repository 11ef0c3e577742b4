"""Compact JWS (EdDSA) handling shared by invocation contexts and confirmations.

Both tokens are short-lived (at most 300 s between `iat` and `exp`) and signed by a host key
the operator trusts. Verification returns the claims or raises; it never returns a partially
checked value.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

import jwt
from cryptography.exceptions import InvalidSignature

from engram_memory.contract.exceptions import TokenExpired, TokenInvalid
from engram_memory.contract.identifiers import has_refused_character
from engram_memory.host.keys import HostKeyring, HostSigningKey

MAX_TOKEN_LIFETIME_S = 300
# Clock skew tolerated between host and service for `iat` (a token "from the future").
CLOCK_SKEW_S = 5
MAX_TOKEN_BYTES = 8192


def sign(claims: Mapping[str, Any], signer: HostSigningKey, typ: str) -> str:
    return jwt.encode(
        dict(claims), signer.private_key, algorithm="EdDSA", headers={"kid": signer.kid, "typ": typ}
    )


def verify(
    token: object, keyring: HostKeyring, typ: str, now_s: float, *, skew_s: int = CLOCK_SKEW_S
) -> dict[str, Any]:
    """Verify signature, type, and the iat/exp window; return the claims.

    `skew_s` is how far in the future `iat` may be (host and service clocks differ).

    Raises:
        TokenExpired: valid but past `exp`.
        TokenInvalid: any other defect; the reason is for the audit trail only.
    """
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_BYTES:
        raise TokenInvalid("absent or oversized")
    header, claims, signing_input, signature = _parse_compact(token)
    if header.get("alg") != "EdDSA" or header.get("typ") != typ:
        raise TokenInvalid("wrong alg or typ")
    kid = header.get("kid")
    key = keyring.get(kid if isinstance(kid, str) else None)
    if key is None:
        raise TokenInvalid("untrusted key")
    try:
        key.verify(signature, signing_input)
    except InvalidSignature as exc:
        raise TokenInvalid("bad signature") from exc
    # PyJWT's own claim checks, kept: `sub` and `jti`, when present, are strings.
    if any(name in claims and not isinstance(claims[name], str) for name in ("sub", "jti")):
        raise TokenInvalid("sub/jti shape")
    iat, exp = claims.get("iat"), claims.get("exp")
    if not _is_int(iat) or not _is_int(exp):
        raise TokenInvalid("iat/exp missing")
    assert isinstance(iat, int)
    assert isinstance(exp, int)
    if exp <= iat or exp - iat > MAX_TOKEN_LIFETIME_S:
        raise TokenInvalid("lifetime out of bounds")
    if iat > now_s + skew_s:
        raise TokenInvalid("issued in the future")
    if now_s >= exp:
        raise TokenExpired("expired")
    return claims


# Three base64url segments (RFC 7515 §7.1); PyJWT's tolerance of up to two trailing `=` kept.
_COMPACT_JWS = re.compile(r"([A-Za-z0-9_-]*={0,2})\.([A-Za-z0-9_-]*={0,2})\.([A-Za-z0-9_-]*={0,2})")


def _parse_compact(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """(header, claims, signing input, signature) of a compact JWS, nothing verified yet.

    One pass over the token, where PyJWT (read for the header, then again to verify) checked
    each of its characters twice in Python: the same refusals (alphabet, padding, canonical
    base64, JSON objects, a string `kid`), and no `crit` (no extension is understood here)
    nor `b64: false` (a detached payload).

    Raises:
        TokenInvalid: anything malformed.
    """
    segments = _COMPACT_JWS.fullmatch(token)
    if segments is None:
        raise TokenInvalid("malformed token")
    header_segment, payload_segment, signature_segment = segments.groups()
    header = _json_object(_segment_bytes(header_segment), "header")
    if "kid" in header and not isinstance(header["kid"], str):
        raise TokenInvalid("malformed header")
    if "crit" in header or header.get("b64", True) is False:
        raise TokenInvalid("unsupported header")
    claims = _json_object(_segment_bytes(payload_segment), "payload")
    signing_input = f"{header_segment}.{payload_segment}".encode("ascii")
    return header, claims, signing_input, _segment_bytes(signature_segment)


def _segment_bytes(segment: str) -> bytes:
    """Decode one base64url segment as PyJWT does: padding only where it completes a
    quantum, and only the canonical encoding of the bytes (no stray low bits).

    Raises:
        TokenInvalid: the segment is not canonical base64url.
    """
    stripped = segment.rstrip("=")
    if (len(stripped) != len(segment) and len(segment) % 4) or len(stripped) % 4 == 1:
        raise TokenInvalid("malformed segment")
    try:
        decoded = base64.urlsafe_b64decode(stripped + "=" * (-len(stripped) % 4))
    except (binascii.Error, ValueError) as exc:
        raise TokenInvalid("malformed segment") from exc
    if base64.urlsafe_b64encode(decoded).rstrip(b"=") != stripped.encode("ascii"):
        raise TokenInvalid("malformed segment")
    return decoded


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    """Raises: TokenInvalid: `data` is not a JSON object."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise TokenInvalid(f"malformed {what}") from exc
    if not isinstance(value, dict):
        raise TokenInvalid(f"malformed {what}")
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def require_str(claims: Mapping[str, Any], name: str, max_bytes: int = 512) -> str:
    """Every string claim is an identifier (host, principal, agent, session, purpose, audit
    id, approver, target): none may hold a control or format character, which would reach
    the audit and the logs verbatim.

    Raises:
        TokenInvalid: the claim is absent, not a string, empty, too long, or holds a control,
            format or separator character.
    """
    value = claims.get(name)
    if not isinstance(value, str) or not value or has_refused_character(value):
        raise TokenInvalid(f"claim {name} invalid")
    if len(value.encode("utf-8")) > max_bytes:
        raise TokenInvalid(f"claim {name} invalid")
    return value
