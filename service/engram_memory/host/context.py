"""The trusted invocation context a host binds to every `tools/list` and `tools/call`.

It travels in `_meta["engram-memory/invocation"]` as a compact JWS (typ `engram-invocation+jwt`)
with these claims; a host in any language can mint it (see docs/integrators/host.md):

| claim | type | meaning |
|---|---|---|
| iss | str | host id |
| tenant, workspace | str | the scope, `[A-Za-z0-9][A-Za-z0-9._-]{0,127}` (no wildcard) |
| principal | str | the accountable identity (`principal.sub`) |
| agent_id, session | str | the AI software and the MCP session the call arrives on |
| purpose_ref | str | the declared purpose; must equal the argument `purpose_ref` after NFC |
| audit_id | str | the host's audit id, echoed as `auditId` in every envelope |
| aud | str, optional | the store the token is for (its ENGRAM_STORE_AUDIENCE) |
| iat, exp | int (s) | issued / expires; `exp - iat` <= 300 |
| deadline_ms | int, optional | epoch ms after which the call must not commit |
| groups | [str], optional | the principal's groups, from the host's identity provider |

`groups` holds `group:<name>` references, sorted by code point and unique, at most 64, each at
most 256 UTF-8 bytes, NFC, without `*` or control/format characters; absent (or `[]`) means no
groups, anything else makes the whole token invalid. The token as a whole stays within 8192
bytes, which bounds the total.

`aud` binds a token to one store: a store with an audience configured accepts only tokens
naming it, and a token naming an audience is accepted by no other store (one without an
audience included), so a token spent on one store cannot be spent again on another that
trusts the same host key. SPEC does not define `aud`; without it a token is accepted by every
store that has no audience configured, as before.

SPEC does not define `groups`: it only widens which grants of the policy data apply
(docs/integrators/host.md); the tool contract is unchanged, and a context without it behaves exactly
as before.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engram_memory.contract.canonical import nfc
from engram_memory.contract.exceptions import NonCanonicalValue, TokenInvalid
from engram_memory.contract.groups import MAX_GROUPS, is_group_ref
from engram_memory.contract.identifiers import is_scope_part
from engram_memory.host.keys import HostKeyring, HostSigningKey
from engram_memory.host.tokens import require_str, sign, verify

INVOCATION_META_KEY = "engram-memory/invocation"
INVOCATION_TYP = "engram-invocation+jwt"


@dataclass(frozen=True)
class InvocationContext:
    host_id: str
    tenant: str
    workspace: str
    principal: str
    agent_id: str
    session: str
    purpose_ref: str
    audit_id: str
    issued_at_s: int
    expires_at_s: int
    deadline_ms: int | None = None
    # The host-asserted groups (`group:<name>`, sorted, unique); () when the claim is absent.
    groups: tuple[str, ...] = ()

    @property
    def scope_ref(self) -> str:
        # Tenant and workspace cannot contain "/" or ":", so this form is unambiguous.
        return f"tenant:{self.tenant}/workspace:{self.workspace}"


def verify_invocation(
    token: object, keyring: HostKeyring, now_s: float | None = None
) -> InvocationContext:
    """Verify a host-signed invocation context.

    Raises:
        TokenInvalid: missing, unsigned, untrusted, expired, malformed, or a wildcard scope.
    """
    claims = verify(token, keyring, INVOCATION_TYP, time.time() if now_s is None else now_s)
    _check_audience(claims.get("aud"), keyring.audience)
    tenant = require_str(claims, "tenant", 128)
    workspace = require_str(claims, "workspace", 128)
    if not is_scope_part(tenant) or not is_scope_part(workspace):
        raise TokenInvalid("tenant/workspace shape")
    deadline = claims.get("deadline_ms")
    if deadline is not None and (not isinstance(deadline, int) or isinstance(deadline, bool)):
        raise TokenInvalid("deadline_ms shape")
    try:
        purpose = nfc(require_str(claims, "purpose_ref"))
    except NonCanonicalValue as exc:
        raise TokenInvalid("purpose_ref encoding") from exc
    return InvocationContext(
        host_id=require_str(claims, "iss"),
        tenant=tenant,
        workspace=workspace,
        principal=require_str(claims, "principal"),
        agent_id=require_str(claims, "agent_id"),
        session=require_str(claims, "session"),
        purpose_ref=purpose,
        audit_id=require_str(claims, "audit_id", 256),
        issued_at_s=int(claims["iat"]),
        expires_at_s=int(claims["exp"]),
        deadline_ms=deadline,
        groups=_verified_groups(claims["groups"]) if "groups" in claims else (),
    )


def _check_audience(aud: object, audience: str | None) -> None:
    """Raises: TokenInvalid: `aud` is not this store's audience (absent when it has one,
    present when it has none or another)."""
    if aud is None and audience is None:
        return
    if not isinstance(aud, str) or aud != audience:
        raise TokenInvalid("audience is not this store")


def _verified_groups(value: object) -> tuple[str, ...]:
    """The `groups` claim, checked strictly: the host signs exactly the canonical form.

    Raises:
        TokenInvalid: not a list (null included), too many, or any group malformed,
            unsorted or repeated.
    """
    if not isinstance(value, list) or len(value) > MAX_GROUPS:
        raise TokenInvalid("groups shape")
    for group in value:
        if not is_group_ref(group):
            raise TokenInvalid("groups item shape")
    if any(earlier >= later for earlier, later in itertools.pairwise(value)):
        raise TokenInvalid("groups not sorted and unique")
    return tuple(value)


def mint_invocation(
    signer: HostSigningKey,
    *,
    host_id: str,
    tenant: str,
    workspace: str,
    principal: str,
    agent_id: str,
    session: str,
    purpose_ref: str,
    audit_id: str,
    lifetime_s: int = 120,
    deadline_ms: int | None = None,
    groups: Sequence[str] | None = None,
    now_s: int | None = None,
    audience: str | None = None,
) -> str:
    """Mint an invocation context token (used by the reference host and tests).

    `groups` is signed as given (a host sorts and de-duplicates its identity provider's
    groups first; `contract.groups.canonical_groups` does that); None or empty omits the claim.
    """
    iat = int(time.time()) if now_s is None else now_s
    claims: dict[str, Any] = {
        "iss": host_id,
        "tenant": tenant,
        "workspace": workspace,
        "principal": principal,
        "agent_id": agent_id,
        "session": session,
        "purpose_ref": purpose_ref,
        "audit_id": audit_id,
        "iat": iat,
        "exp": iat + lifetime_s,
    }
    if deadline_ms is not None:
        claims["deadline_ms"] = deadline_ms
    if groups:
        claims["groups"] = list(groups)
    if audience is not None:
        claims["aud"] = audience
    return sign(claims, signer, INVOCATION_TYP)
