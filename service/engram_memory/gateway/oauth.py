"""Who an HTTP gateway call runs for: the bearer JWT, verified, mapped to a `Caller`.

The gateway is an OAuth 2.1 protected resource (MCP authorization). The SDK's bearer
middleware hands every `Authorization: Bearer` token to `JwtVerifier.verify_token`, which
either returns a `GatewayAccessToken` carrying the binding the token proves, or None (the
SDK then answers 401 with `WWW-Authenticate: Bearer ... resource_metadata=...`). Every
refusal is one `token_refused` entry in the gateway audit log with one reason (bounded in a
storm, audit_bound.py); the token itself is never written anywhere.

Checks, in order (the first failure decides the reason):

1. a JWS with a JSON header and payload, at most 16 KiB -> `malformed`;
2. header `alg` among the configured algorithms, never `none` or HS* -> `algorithm_refused`;
3. the unverified `iss` is exactly the configured issuer -> `wrong_issuer` (`missing_claim`
   when absent); checked before any key lookup, so foreign tokens cost no JWKS fetch;
4. header `kid` names a signing key of the issuer's JWKS -> `unknown_key`, or
   `jwks_unavailable` when there is no JWKS to look in;
5. the key is not pinned to another algorithm (`algorithm_refused`), the signature verifies
   (`bad_signature`);
6. `exp`, `iat`, `iss`, `aud`, `sub` present (`missing_claim`); `exp`, `nbf`, `iat` within a
   30 s leeway (`expired`, `not_yet_valid`); `aud` is or contains the configured audience
   (`wrong_audience`); claims of the wrong type -> `malformed`; a lifetime (`exp - iat`)
   or a remaining lifetime (`exp - now`) over `http.max_token_lifetime_s` (default 24 h)
   -> `lifetime_too_long`;
7. the claim mapping: principal, tenant, workspace, agent and groups present and well formed
   -> `missing_claim` / `malformed`;
8. (tenant, workspace) is one of the scopes this gateway serves -> `scope_not_served`;
9. the token's scopes (`scope` or `scp`) include every required scope -> `insufficient_scope`
   (the SDK answers 403 rather than 401).

Audit `detail` names the header/claim values a refusal is about only when they are short
printable ASCII, and says `unverified_` when they come from a token whose signature was not
(or could not be) checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio.to_thread
import jwt
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext

from engram_memory.contract.exceptions import (
    CallerUnavailable,
    GatewayAuditUnavailable,
    JwksUnavailable,
    OAuthRefused,
    TokenInvalid,
    UnknownKey,
)
from engram_memory.contract.groups import MAX_GROUPS, is_group_ref
from engram_memory.contract.identifiers import has_refused_character, is_scope_part
from engram_memory.gateway.caller import Caller
from engram_memory.gateway.config import DEFAULT_MAX_TOKEN_LIFETIME_S
from engram_memory.gateway.jwks import JwksCache, SigningKey
from engram_memory.gateway.token_cache import TokenCache
from engram_memory.host.confirmation import check_approver

MAX_TOKEN_BYTES = 16 * 1024
LEEWAY_S = 30
# Never trusted whatever the configuration says: `none` is unsigned, and HS* would make the
# IdP's public key an HMAC secret anyone holds (algorithm confusion).
_NEVER = re.compile(r"none|HS\d+", re.IGNORECASE)
# The shape the upstream verifies in every invocation context (host/context.py).
_PRINTABLE = re.compile(r"[\x21-\x7e]{1,128}")
_MAX_REF_BYTES = 512


class RefusalLog(Protocol):
    """The part of `GatewayAudit` the verifier writes to."""

    def record(
        self, event: str, *, reason: str, detail: Mapping[str, str] | None = None
    ) -> str: ...


@dataclass(frozen=True)
class ClaimSource:
    """Where one binding comes from: a claim (with a prefix put before its value) or a
    fixed value for a one-tenant deployment."""

    claim: str | None = None
    value: str | None = None
    prefix: str = ""


@dataclass(frozen=True)
class ServedScope:
    tenant: str
    workspace: str
    purposes: tuple[str, ...]


@dataclass(frozen=True)
class TokenRules:
    """What a bearer token must be to be accepted, and how its claims bind a caller."""

    issuer: str
    audience: str
    algorithms: tuple[str, ...]
    scopes: tuple[ServedScope, ...]
    principal: ClaimSource = ClaimSource(claim="sub", prefix="user:")
    tenant: ClaimSource = ClaimSource(claim="tenant")
    workspace: ClaimSource = ClaimSource(claim="workspace")
    groups: ClaimSource | None = None
    agent: ClaimSource | None = None
    required_scopes: tuple[str, ...] = ()
    leeway_s: int = LEEWAY_S
    max_lifetime_s: int = DEFAULT_MAX_TOKEN_LIFETIME_S


class GatewayAccessToken(AccessToken):
    """A verified token and the binding it proves (all but the session, which is the MCP
    session's). `token` holds the bearer token's sha256, never the token."""

    tenant: str
    workspace: str
    principal: str
    agent_id: str
    approver: str
    purposes: tuple[str, ...]
    groups: tuple[str, ...] = ()
    # `human:<sub>`'s groups for four-eyes rules: the token's, when a groups mapping is
    # configured (the token speaks for the person who approves); None otherwise.
    approver_groups: tuple[str, ...] | None = None


def _shown(value: object) -> str:
    """A header or claim value as the audit may show it: short printable ASCII only."""
    return value if isinstance(value, str) and _PRINTABLE.fullmatch(value) else "(not shown)"


class JwtVerifier:
    """The SDK's `TokenVerifier` for the gateway: JWT access tokens from one issuer."""

    def __init__(
        self,
        rules: TokenRules,
        keys: JwksCache,
        audit: RefusalLog,
        accepted: TokenCache[GatewayAccessToken] | None = None,
    ) -> None:
        self._rules, self._keys, self._audit = rules, keys, audit
        self._accepted = accepted if accepted is not None else TokenCache()
        self._algorithms = frozenset(a for a in rules.algorithms if not _NEVER.fullmatch(a))
        self._served = {(s.tenant, s.workspace): s for s in rules.scopes}

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's binding, or None (and one `token_refused` audit entry) if refused.

        A token lacking a required scope is returned anyway, with its own scopes, after its
        refusal is audited: the SDK then answers 403 `insufficient_scope`, which tells the
        client to ask for more scope rather than for a new login.
        """
        if not isinstance(token, str) or len(token) > MAX_TOKEN_BYTES:
            await self._refuse(OAuthRefused("malformed"))
            return None
        digest = "sha256:" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
        cached = self._accepted.get(digest)
        if cached is not None:
            return cached
        try:
            claims = await self._verified_claims(token)
            access = self._bound(digest, claims)
        except OAuthRefused as refused:
            await self._refuse(refused)
            return None
        missing = [s for s in self._rules.required_scopes if s not in access.scopes]
        if missing:
            await self._refuse(
                OAuthRefused("insufficient_scope", missing=_shown(" ".join(missing)))
            )
        elif access.expires_at is not None:
            self._accepted.put(digest, access, access.expires_at)
        return access

    async def _refuse(self, refused: OAuthRefused) -> None:
        # Each entry is fsynced (the log bounds a storm of them, audit_bound.py): in a worker
        # thread, so bad tokens do not stall the event loop that serves everyone else.
        await anyio.to_thread.run_sync(self._write, refused.reason, refused.detail)

    def _write(self, reason: str, detail: Mapping[str, str]) -> None:
        with contextlib.suppress(GatewayAuditUnavailable):
            # Refused either way; a log that cannot be written fails the calls that need it.
            self._audit.record("token_refused", reason=reason, detail=detail)

    async def _verified_claims(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise OAuthRefused("malformed") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms or _NEVER.fullmatch(alg):
            raise OAuthRefused("algorithm_refused", unverified_alg=_shown(alg))
        if "iss" not in unverified:
            raise OAuthRefused("missing_claim", claim="iss")
        if unverified["iss"] != self._rules.issuer:
            raise OAuthRefused("wrong_issuer", unverified_iss=_shown(unverified["iss"]))
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise OAuthRefused("unknown_key", unverified_kid="(absent)")
        try:
            key = await self._keys.key(kid)
        except UnknownKey:
            raise OAuthRefused("unknown_key", unverified_kid=_shown(kid)) from None
        except JwksUnavailable:
            raise OAuthRefused("jwks_unavailable") from None
        if key.alg is not None and key.alg != alg:
            # The IdP pinned this key to another algorithm.
            raise OAuthRefused("algorithm_refused", unverified_alg=_shown(alg))
        return self._decoded(token, key, alg)

    def _decoded(self, token: str, key: SigningKey, alg: str) -> dict[str, Any]:
        claims = self._checked(token, key, alg)
        # PyJWT checked the types of exp and iat (numbers) and that neither lies beyond the
        # leeway; the bound on how long the token lives is ours.
        longest = self._rules.max_lifetime_s + self._rules.leeway_s
        exp, iat = float(claims["exp"]), float(claims["iat"])
        if exp - iat > longest or exp - time.time() > longest:
            raise OAuthRefused("lifetime_too_long")
        return claims

    def _checked(self, token: str, key: SigningKey, alg: str) -> dict[str, Any]:
        rules = self._rules
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=rules.audience,
                issuer=rules.issuer,
                leeway=rules.leeway_s,
                options={"require": ["exp", "iat", "iss", "aud", "sub"], "strict_aud": False},
            )
        except jwt.MissingRequiredClaimError as error:
            raise OAuthRefused("missing_claim", claim=_shown(error.claim)) from None
        except jwt.ExpiredSignatureError:
            raise OAuthRefused("expired") from None
        except jwt.ImmatureSignatureError:
            raise OAuthRefused("not_yet_valid") from None
        except jwt.InvalidAudienceError:
            raise OAuthRefused("wrong_audience") from None
        except jwt.InvalidIssuerError:
            raise OAuthRefused("wrong_issuer") from None
        except (jwt.InvalidSignatureError, jwt.InvalidKeyError, jwt.InvalidAlgorithmError):
            raise OAuthRefused("bad_signature") from None
        except jwt.PyJWTError:
            # A claim of the wrong type (a string `exp`, a number `sub`, ...).
            raise OAuthRefused("malformed") from None
        except (ValueError, TypeError):
            # The key is not of the algorithm's type (an EC key under RS256): no signature
            # by this key can be checked, so none is accepted.
            raise OAuthRefused("bad_signature") from None
        return claims

    def _bound(self, digest: str, claims: Mapping[str, Any]) -> GatewayAccessToken:
        rules = self._rules
        principal = _ref(claims, rules.principal, "principal")
        tenant = _ref(claims, rules.tenant, "tenant")
        workspace = _ref(claims, rules.workspace, "workspace")
        if not (is_scope_part(tenant) and is_scope_part(workspace)):
            raise OAuthRefused("malformed", claim="tenant/workspace")
        served = self._served.get((tenant, workspace))
        if served is None:
            raise OAuthRefused("scope_not_served", tenant=tenant, workspace=workspace)
        subject = claims["sub"]
        try:
            check_approver(f"human:{subject}")
        except TokenInvalid:
            raise OAuthRefused("malformed", claim="sub") from None
        groups = _groups(claims, rules.groups)
        client = _client_id(claims)
        if rules.agent is not None:
            agent = _ref(claims, rules.agent, "agent")
        elif client is not None:
            agent = _checked_ref(f"agent:{client}", "agent")
        else:
            raise OAuthRefused("missing_claim", claim="azp")
        return GatewayAccessToken(
            token=digest,
            client_id=client or agent,
            scopes=_token_scopes(claims),
            # The SDK drops a token past `expires_at`; ours already allowed the leeway.
            expires_at=int(claims["exp"]) + rules.leeway_s,
            resource=rules.audience,
            subject=subject,
            claims={"iss": claims["iss"]},
            tenant=tenant,
            workspace=workspace,
            principal=principal,
            agent_id=agent,
            approver=f"human:{subject}",
            purposes=served.purposes,
            groups=groups,
            approver_groups=None if rules.groups is None else groups,
        )


def _client_id(claims: Mapping[str, Any]) -> str | None:
    for name in ("client_id", "azp"):
        value = claims.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _checked_ref(value: str, binding: str) -> str:
    if (
        len(value.encode("utf-8", "surrogatepass")) > _MAX_REF_BYTES
        or value != value.strip()
        or has_refused_character(value)
        or not unicodedata.is_normalized("NFC", value)
    ):
        raise OAuthRefused("malformed", claim=binding)
    return value


def _ref(claims: Mapping[str, Any], source: ClaimSource, binding: str) -> str:
    if source.value is not None:
        return source.value
    name = source.claim or binding
    value = claims.get(name)
    if value is None:
        raise OAuthRefused("missing_claim", claim=_shown(name))
    if not isinstance(value, str) or not value:
        raise OAuthRefused("malformed", claim=_shown(name))
    return _checked_ref(source.prefix + value, binding)


def _groups(claims: Mapping[str, Any], source: ClaimSource | None) -> tuple[str, ...]:
    """The canonical groups (`group:<name>`, sorted, unique, at most 64); a claim that is
    present but not a list of well-formed names refuses the whole token, so a typo at the
    IdP cannot silently drop (or widen) a caller's grants."""
    if source is None:
        return ()
    if source.value is not None:
        return (source.value,)
    name = source.claim or "groups"
    value = claims.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        raise OAuthRefused("malformed", claim=_shown(name))
    groups = sorted({source.prefix + g for g in value})
    if len(groups) > MAX_GROUPS or not all(is_group_ref(g) for g in groups):
        raise OAuthRefused("malformed", claim=_shown(name))
    return tuple(groups)


def _token_scopes(claims: Mapping[str, Any]) -> list[str]:
    """OAuth scopes: `scope` (a space-separated string, RFC 9068) or `scp` (Entra's string,
    Okta's list); anything else grants none."""
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            return value.split()
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            return list(value)
    return []


def caller_of(ctx: ServerRequestContext[Any]) -> Caller:
    """The Caller of an HTTP request: the verified token's binding, on the request's session.

    The session is the MCP session (`session:<Mcp-Session-Id>`) on a handshake-era
    connection. The 2026 protocol era has no sessions over HTTP; there a call's session is
    its bearer token (`session:bearer-<first 32 hex of the token's sha256>`): stable for the
    token's lifetime, so a confirmation and the call it releases share it, and no token text.

    Raises:
        CallerUnavailable: no verified gateway token on the request.
    """
    request = ctx.request
    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    token = user.access_token if isinstance(user, AuthenticatedUser) else None
    if not isinstance(token, GatewayAccessToken):
        raise CallerUnavailable
    headers = getattr(request, "headers", None)
    mcp_session = headers.get("mcp-session-id") if headers is not None else None
    if isinstance(mcp_session, str) and mcp_session:
        session = f"session:{mcp_session}"
    else:
        session = "session:bearer-" + token.token.removeprefix("sha256:")[:32]
    return Caller(
        tenant=token.tenant,
        workspace=token.workspace,
        principal=token.principal,
        agent_id=token.agent_id,
        session=session,
        approver=token.approver,
        purposes=token.purposes,
        groups=token.groups,
        approver_groups=token.approver_groups,
    )
