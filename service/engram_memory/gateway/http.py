"""Team mode: the gateway as an OAuth 2.1 protected resource over streamable HTTP.

Everything OAuth-shaped on the wire is the MCP SDK's resource-server support, so clients
meet the MCP authorization specification as the SDK implements it:

- `GET /.well-known/oauth-protected-resource<path>` (RFC 9728): `resource` (the configured
  canonical URL) and `authorization_servers` ([the configured issuer]), for a client's
  discovery of where to get a token;
- a request to the MCP endpoint without a usable bearer token: 401 with
  `WWW-Authenticate: Bearer error="invalid_token", ..., resource_metadata="<that URL>"`; a
  token lacking a required scope: 403 `insufficient_scope`;
- an MCP session belongs to the (client, issuer, subject) that opened it: another token's
  request on it is refused by the SDK.

Behind the bearer check, every POST body passes the JSON gate `engram-memory serve` runs
(json_gate_http.py; door.py says what it refuses): 400 with a constant JSON-RPC error, and a
`request_refused` audit entry, flood-bounded. Inside the check, not in front of it: a client
without a valid token meets 401 first, whatever its body, and cannot write gateway audit
entries with bodies (only `token_refused` ones, bounded the same way); and the gate's work
(a strict parse) is spent only on requests that may reach the server at all. The gate also
makes every JSON-RPC error the SDK's transport builds constant (it would echo parser text).

The tokens themselves are judged by gateway/oauth.py (JWT against the issuer's JWKS, every
refusal audited). Streaming responses, not `json_response`: an elicitation (a human's
confirmation) must reach the client while its call is still open.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, MutableMapping
from typing import Any
from urllib.parse import urlparse

import anyio
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route

from engram_memory.contract.exceptions import ConfigurationError, UpstreamUnavailable
from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.config import ClaimMapping, GatewayConfig, HttpBinding
from engram_memory.gateway.door import OVERSIZED, DoorRefusals, sdk_accepts
from engram_memory.gateway.jwks import JwksCache
from engram_memory.gateway.oauth import (
    ClaimSource,
    JwtVerifier,
    ServedScope,
    TokenRules,
    caller_of,
)
from engram_memory.gateway.server import build_gateway_server
from engram_memory.gateway.upstream import Upstream
from engram_memory.transport.http_serving import AdmitWhileServing, HealthProbe, listen, serve_asgi
from engram_memory.transport.http_settings import (
    LOOPBACK_HOSTS,
    LOOPBACK_ORIGINS,
    HttpSettings,
    is_loopback,
)
from engram_memory.transport.json_gate import GateRefusal
from engram_memory.transport.json_gate_http import ASGIApp, JsonGate, Receive, Scope, Send
from engram_memory.transport.stopping import GracefulStop

# How long a stopping gateway lets the upstream connection close on its own.
UPSTREAM_CLOSE_S = 5.0


def _source(mapping: ClaimMapping) -> ClaimSource:
    return ClaimSource(claim=mapping.claim, value=mapping.value, prefix=mapping.prefix)


def token_rules(http: HttpBinding) -> TokenRules:
    """The verifier's rules from the configuration's `http:` section."""
    claims = http.claims
    return TokenRules(
        issuer=http.issuer,
        audience=http.effective_audience,
        algorithms=tuple(http.algorithms),
        scopes=tuple(ServedScope(s.tenant, s.workspace, tuple(s.purposes)) for s in http.scopes),
        principal=_source(claims.principal),
        tenant=_source(claims.tenant),
        workspace=_source(claims.workspace),
        groups=None if claims.groups is None else _source(claims.groups),
        agent=None if claims.agent is None else _source(claims.agent),
        required_scopes=tuple(http.required_scopes),
        max_lifetime_s=http.max_token_lifetime_s,
    )


def http_settings(http: HttpBinding) -> HttpSettings:
    """The listener's limits (the `serve` defaults) and its Host/Origin allow-lists.

    Raises:
        ConfigurationError: listening off loopback without `allowed_hosts` (DNS-rebinding
            protection needs the names clients use).
    """
    host = http.listen.host
    if not is_loopback(host) and not http.allowed_hosts:
        raise ConfigurationError(
            f"http.listen.host {host} is not loopback: set http.allowed_hosts to the Host "
            "names clients use (and http.allowed_origins to the browser origins, if any)"
        )
    return HttpSettings(
        host=host,
        allowed_hosts=tuple(http.allowed_hosts) or LOOPBACK_HOSTS,
        allowed_origins=tuple(http.allowed_origins)
        or (LOOPBACK_ORIGINS if is_loopback(host) else ()),
    )


def endpoint_path(resource: str) -> str:
    """The MCP endpoint's path: the resource URL's (`/mcp` when it has none)."""
    path = urlparse(resource).path.rstrip("/")
    return path or "/mcp"


def gateway_app(
    config: GatewayConfig,
    upstream: Upstream,
    audit: GatewayAudit,
    settings: HttpSettings,
    keys: JwksCache | None = None,
) -> Starlette:
    """The gateway's ASGI app: the SDK's streamable HTTP with its OAuth resource server,
    holding `upstream` open for as long as the app runs (its lifespan).

    Raises:
        ConfigurationError: the signing key cannot be read or is not Ed25519.
    """
    http = config.http
    assert http is not None
    rules = token_rules(http)
    verifier = JwtVerifier(rules, keys or JwksCache(http.jwks_url), audit)
    server = build_gateway_server(upstream, caller_of, config, audit)
    app = server.streamable_http_app(
        streamable_http_path=endpoint_path(http.resource),
        json_response=False,
        host=settings.host,
        max_request_body_size=settings.max_request_bytes,
        max_sessions=settings.max_sessions,
        session_idle_timeout=settings.session_idle_seconds,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(settings.allowed_hosts),
            allowed_origins=list(settings.allowed_origins),
        ),
        # Validated from strings: the settings keep a path-less URL as written, where
        # AnyHttpUrl() would add a "/" and the metadata would name another issuer (RFC 8414
        # compares issuers as exact strings).
        auth=AuthSettings.model_validate(
            {
                "issuer_url": http.issuer,
                "resource_server_url": http.resource,
                "required_scopes": list(http.required_scopes) or None,
                # The verifier checks `aud` itself (exact member, the configured audience).
                "validate_token_resource": False,
            }
        ),
        token_verifier=verifier,
    )
    door = DoorRefusals(audit, "http")
    _gate_behind_bearer_check(app, endpoint_path(http.resource), door, settings)
    sdk_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(asgi: Starlette) -> AsyncIterator[None]:
        # The deadline is set once serving ended: a stop during the upstream's own start-up
        # must not wait for it to finish starting; past the bound, closing it is cancelled
        # (which ends the child).
        with anyio.CancelScope() as closing:
            async with upstream:
                async with sdk_lifespan(asgi), anyio.create_task_group() as group:
                    # The upstream starts while the first clients connect; a failure shows
                    # on the first call (and is retried there), as in stdio mode.
                    group.start_soon(_warm_up, upstream)
                    yield
                    group.cancel_scope.cancel()
                closing.deadline = anyio.current_time() + UPSTREAM_CLOSE_S
        audit.flush_all()

    app.router.lifespan_context = lifespan
    return app


def _gate_behind_bearer_check(
    app: Starlette, path: str, door: DoorRefusals, settings: HttpSettings
) -> None:
    """Put the JSON gate between the SDK's bearer check and its MCP endpoint (the module
    says why there)."""

    async def audited(refusal: GateRefusal, _peer: str) -> None:
        await door.refused(refusal)

    for route in app.router.routes:
        if isinstance(route, Route) and route.path == path:
            guard = route.app
            if isinstance(guard, RequireAuthMiddleware):
                gate = JsonGate(
                    guard.app,
                    max_body=settings.max_request_bytes,
                    accepts=sdk_accepts,
                    on_refusal=audited,
                )
                guard.app = _TooLargeAudited(gate, door)
                return
    # The SDK changed how it assembles the app: refuse to serve without the gate.
    raise ConfigurationError("the MCP endpoint is not behind the SDK's bearer check")


async def _warm_up(upstream: Upstream) -> None:
    with contextlib.suppress(UpstreamUnavailable):
        await upstream.connect()


def run_http(config: GatewayConfig, upstream: Upstream, audit: GatewayAudit) -> int:
    """Serve the gateway over streamable HTTP until SIGTERM/SIGINT (calls in flight drain
    first); prints its URL once it listens. Returns the exit code (0).

    Raises:
        ConfigurationError: the listen address cannot be bound, the Host allow-list is
            missing off loopback, or the signing key is unusable.
    """
    http = config.http
    assert http is not None
    settings = http_settings(http)
    try:
        sock = listen(settings.host, http.listen.port)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigurationError(
            f"cannot listen on {settings.host}:{http.listen.port}: {reason}"
        ) from exc
    try:
        if not settings.loopback:
            print(
                f"engram-memory gateway: warning: listening on {settings.host} without TLS; "
                "put a TLS-terminating proxy in front (http.resource is its https URL)",
                file=sys.stderr,
                flush=True,
            )
        stop = GracefulStop()
        app = gateway_app(config, upstream, audit, settings)
        guarded = HealthProbe(AdmitWhileServing(app, stop), stop)
        port = int(sock.getsockname()[1])
        serve_asgi(guarded, settings, port, stop, endpoint_path(http.resource)).run(sockets=[sock])
    finally:
        sock.close()
    return 0


class _TooLargeAudited:
    """Audits the SDK's 413 for a body over the size cap: the gate hands such a body on
    unread (json_gate_http.py) and, unlike serve, nothing in front of it records it."""

    def __init__(self, app: ASGIApp, door: DoorRefusals) -> None:
        self._app, self._door = app, door

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        status = 0

        async def watched(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message.get("status", 0))
            await send(message)

        await self._app(scope, receive, watched)
        if status == 413:
            await self._door.refused(OVERSIZED)
