"""Compact JWS (EdDSA) handling shared by invocation contexts and confirmations.

Both tokens are short-lived (at most 300 s between `iat` and `exp`) and signed by a host key
the operator trusts. Verification returns the claims or raises; it never returns a partially
checked value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jwt

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
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise TokenInvalid("malformed header") from exc
    if header.get("alg") != "EdDSA" or header.get("typ") != typ:
        raise TokenInvalid("wrong alg or typ")
    kid = header.get("kid")
    key = keyring.get(kid if isinstance(kid, str) else None)
    if key is None:
        raise TokenInvalid("untrusted key")
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=["EdDSA"],
            # exp/iat are checked below against the caller's clock, so tests can pin time.
            # `aud` is the invocation context's to check (host/context.py), not PyJWT's.
            options={
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
                "verify_aud": False,
            },
        )
    except jwt.PyJWTError as exc:
        raise TokenInvalid("bad signature") from exc
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
