"""Host-issued human confirmations for destructive calls (SPEC §7).

A confirmation travels in `_meta["engram-memory/confirmation"]` as a compact JWS (typ
`engram-confirmation+jwt`) with these claims:

| claim | meaning |
|---|---|
| cap | the tool name it approves |
| target | `candidate_id` / `record_id` (for capture: the operation digest) |
| op | the operation digest `D("tool-operation", {tool, arguments})` of exactly this call |
| session, principal | must equal the invocation context's |
| approver | the human who said yes: `human:<subject>`, the subject non-blank, at most |
|  | 256 bytes, without surrounding whitespace or control/format characters |
| approver_groups | optional: the `group:<name>` groups the host asserts for the approver |
|  | (at most 64, well-formed); absent: the host asserts none (four-eyes rules by group refuse) |
| iat, resolved_at, exp | seconds; `exp - iat` <= 300 (policy may shorten); execution |
|  | must start within 30 s of `resolved_at` |
| jti | single-use id, consumed atomically by the first call that passes the gate |

Verification here is stateless; single use (`jti`) is enforced by the store in the call's
transaction.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engram_memory.contract.exceptions import TokenInvalid
from engram_memory.contract.groups import canonical_groups
from engram_memory.contract.identifiers import has_refused_character
from engram_memory.host.keys import HostKeyring, HostSigningKey
from engram_memory.host.tokens import require_str, sign, verify

CONFIRMATION_META_KEY = "engram-memory/confirmation"
CONFIRMATION_TYP = "engram-confirmation+jwt"
EXECUTION_WINDOW_S = 30
HUMAN_PREFIX = "human:"
MAX_APPROVER_SUBJECT_BYTES = 256
# Control, format (zero-width, bidi), surrogate, private-use and unassigned characters, and
# line/paragraph separators: an approver naming a human must read the same to every auditor.


@dataclass(frozen=True)
class ConfirmationBinding:
    """What a confirmation must be bound to for this call."""

    cap: str
    target: str
    op: str
    session: str
    principal: str


@dataclass(frozen=True)
class VerifiedConfirmation:
    """A confirmation that released the gate: the evidence of who approved what, and when."""

    jti: str
    approver: str
    issued_at_s: int
    expires_at_s: int
    resolved_at_s: int
    op: str
    # None: the host asserted no groups for the approver (not the same as an empty list).
    approver_groups: tuple[str, ...] | None = None


def check_approver(approver: str) -> None:
    """Accept only `human:<subject>` with a subject a human can be named by (SPEC §7).

    Raises:
        TokenInvalid: not a human, a blank or over-long subject, surrounding whitespace, or a
            control/format character anywhere.
    """
    if not approver.startswith(HUMAN_PREFIX):
        raise TokenInvalid("approver is not a human")
    subject = approver[len(HUMAN_PREFIX) :]
    if not subject or subject.strip() != subject:
        raise TokenInvalid("approver subject blank or padded")
    if len(subject.encode("utf-8")) > MAX_APPROVER_SUBJECT_BYTES:
        raise TokenInvalid("approver subject too long")
    if has_refused_character(approver):
        raise TokenInvalid("approver holds a control or format character")


def verify_confirmation(
    token: object,
    keyring: HostKeyring,
    expected: ConfirmationBinding,
    *,
    max_ttl_s: int = 300,
    now_s: float | None = None,
) -> VerifiedConfirmation:
    """Check signature, binding, human approver, TTL and the 30 s execution window.

    Raises:
        TokenInvalid: the confirmation does not release the gate (maps to `gate_failed`).
    """
    now = time.time() if now_s is None else now_s
    # SPEC §7: a timestamp in the future fails the gate; no clock skew is tolerated here.
    claims = verify(token, keyring, CONFIRMATION_TYP, now, skew_s=0)
    for name in ("cap", "target", "op", "session", "principal"):
        if require_str(claims, name) != getattr(expected, name):
            raise TokenInvalid(f"bound to another {name}")
    approver = require_str(claims, "approver")
    check_approver(approver)
    iat, exp = int(claims["iat"]), int(claims["exp"])
    if exp - iat > max_ttl_s:
        raise TokenInvalid("ttl longer than policy allows")
    resolved = claims.get("resolved_at")
    if not isinstance(resolved, int) or isinstance(resolved, bool):
        raise TokenInvalid("resolved_at missing")
    if resolved < iat or resolved > now:
        raise TokenInvalid("resolved_at before issue or in the future")
    if now > resolved + EXECUTION_WINDOW_S:
        raise TokenInvalid("execution window passed")
    return VerifiedConfirmation(
        require_str(claims, "jti", 128),
        approver,
        iat,
        exp,
        resolved,
        expected.op,
        _approver_groups(claims),
    )


def _approver_groups(claims: Mapping[str, Any]) -> tuple[str, ...] | None:
    groups = claims.get("approver_groups")
    if groups is None:
        return None
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise TokenInvalid("approver_groups is not a list of group references")
    try:
        return tuple(canonical_groups(groups))
    except ValueError as exc:
        raise TokenInvalid("approver_groups malformed") from exc


def mint_confirmation(
    signer: HostSigningKey,
    binding: ConfirmationBinding,
    *,
    approver: str,
    lifetime_s: int = 120,
    now_s: int | None = None,
    resolved_at_s: int | None = None,
    jti: str | None = None,
    approver_groups: list[str] | None = None,
) -> str:
    """Mint a confirmation once a human said yes (reference host and tests); pass
    `approver_groups` to assert the approver's groups for four-eyes rules."""
    iat = int(time.time()) if now_s is None else now_s
    claims: dict[str, object] = {
        "cap": binding.cap,
        "target": binding.target,
        "op": binding.op,
        "session": binding.session,
        "principal": binding.principal,
        "approver": approver,
        "iat": iat,
        "resolved_at": iat if resolved_at_s is None else resolved_at_s,
        "exp": iat + lifetime_s,
        "jti": jti or uuid.uuid4().hex,
    }
    if approver_groups is not None:
        claims["approver_groups"] = approver_groups
    return sign(claims, signer, CONFIRMATION_TYP)
