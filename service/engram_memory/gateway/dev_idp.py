"""A development identity provider, to try team mode on one machine. NOT FOR PRODUCTION.

`engram-memory gateway dev-idp` plays the organisation's identity provider for an HTTP
gateway (gateway/oauth.py): it holds one ES256 signing key, made at start-up and kept only
in memory, and serves on loopback only

- `GET /.well-known/oauth-authorization-server`: RFC 8414 metadata (`issuer`, `jwks_uri`);
- `GET /jwks.json`: the public half of the key, the JWKS the gateway's `http.jwks_url` names;
- `POST /mint`: a signed access token for the subject, groups and scope asked for, to anyone
  presenting the mint secret (`Authorization: Bearer <secret>`); `dev-idp mint` reads that
  secret from the state file the running IdP wrote (0600), so another local user cannot
  mint.

It is not an identity provider anyone should trust: nobody logs in, any subject and any group
is minted on request, and a restart forgets the key (every token minted before is then
refused `unknown_key`). The gateway does not read OIDC discovery (it is configured with the
issuer and the JWKS URL), so none is served; the metadata names an authorization and a token
endpoint, as clients' parsers require, that refuse with an OAuth error pointing at `mint`.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

from engram_memory.contract.exceptions import DevIdpRefused
from engram_memory.contract.identifiers import is_scope_part
from engram_memory.transport.http_settings import is_loopback

NOT_FOR_PRODUCTION = "NOT FOR PRODUCTION"
ALGORITHM = "ES256"
METADATA_PATH = "/.well-known/oauth-authorization-server"
JWKS_PATH = "/jwks.json"
MINT_PATH = "/mint"
DEFAULT_AUDIENCE = "http://127.0.0.1:8787/mcp"  # examples/gateway/team-dev.yaml's resource
DEFAULT_TENANT, DEFAULT_WORKSPACE = "acme", "support"
DEFAULT_CLIENT = "dev-client"
DEFAULT_LIFETIME_S = 3600
MIN_LIFETIME_S, MAX_LIFETIME_S = 60, 86400  # the gateway refuses longer (max_token_lifetime_s)
# An `--expired` token ended this long ago: well past the gateway's 30 s leeway.
EXPIRED_SINCE_S = 600
MAX_BODY_BYTES = 8 * 1024
MAX_GROUPS = 16

# Codes of DevIdpRefused (and of the JSON errors of POST /mint).
NOT_LOOPBACK = "DEV_IDP_NOT_LOOPBACK"
INVALID_REQUEST = "DEV_IDP_INVALID_REQUEST"
UNAUTHORIZED = "DEV_IDP_UNAUTHORIZED"
UNREACHABLE = "DEV_IDP_UNREACHABLE"
NOT_RUNNING = "DEV_IDP_NOT_RUNNING"
CANNOT_LISTEN = "DEV_IDP_CANNOT_LISTEN"
STATE_UNWRITABLE = "DEV_IDP_STATE_UNWRITABLE"

# Deliberately narrow ASCII shapes: what is minted must pass the gateway's own checks, and
# whatever the IdP logs must be safe to print as it is.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SCOPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}")
_AUDIENCE = re.compile(r"https?://[\x21-\x7e]{1,500}")
_REQUEST_FIELDS = frozenset(
    {"sub", "groups", "tenant", "workspace", "audience", "client", "scope", "lifetime_s", "expired"}
)


@dataclass(frozen=True)
class TokenRequest:
    """What a token is minted for; `audience=None` means the IdP's default audience."""

    sub: str
    groups: tuple[str, ...] = ()
    tenant: str = DEFAULT_TENANT
    workspace: str = DEFAULT_WORKSPACE
    audience: str | None = None
    client: str = DEFAULT_CLIENT
    scope: tuple[str, ...] = ()
    lifetime_s: int = DEFAULT_LIFETIME_S
    expired: bool = False

    @classmethod
    def from_json(cls, body: object) -> TokenRequest:
        """A request from POST /mint's JSON body (a closed object; only `sub` required).

        Raises:
            DevIdpRefused: DEV_IDP_INVALID_REQUEST, naming the first offending field.
        """
        if not isinstance(body, dict):
            raise DevIdpRefused(INVALID_REQUEST, "the body is not a JSON object", field="body")
        unknown = sorted(set(body) - _REQUEST_FIELDS)
        if unknown:
            raise DevIdpRefused(INVALID_REQUEST, "unknown field", field=_shown(unknown[0]))
        request = cls(
            sub=_text(body, "sub", _NAME, None),
            groups=_texts(body, "groups", _GROUP, MAX_GROUPS),
            tenant=_text(body, "tenant", None, DEFAULT_TENANT),
            workspace=_text(body, "workspace", None, DEFAULT_WORKSPACE),
            audience=_text(body, "audience", _AUDIENCE, "") or None,
            client=_text(body, "client", _NAME, DEFAULT_CLIENT),
            scope=_texts(body, "scope", _SCOPE, MAX_GROUPS),
            lifetime_s=_lifetime(body.get("lifetime_s", DEFAULT_LIFETIME_S)),
            expired=_flag(body.get("expired", False)),
        )
        for field in ("tenant", "workspace"):
            if not is_scope_part(getattr(request, field)):
                raise DevIdpRefused(INVALID_REQUEST, "not a tenant/workspace name", field=field)
        return request


def _shown(value: str) -> str:
    return value if _NAME.fullmatch(value) else "(not shown)"


def _text(
    body: Mapping[str, Any], field: str, shape: re.Pattern[str] | None, default: str | None
) -> str:
    value = body.get(field, default)
    if not isinstance(value, str) or (shape is not None and value and not shape.fullmatch(value)):
        raise DevIdpRefused(INVALID_REQUEST, "missing or malformed", field=field)
    if not value and default is None:
        raise DevIdpRefused(INVALID_REQUEST, "missing or malformed", field=field)
    return value


def _texts(
    body: Mapping[str, Any], field: str, shape: re.Pattern[str], most: int
) -> tuple[str, ...]:
    value = body.get(field, [])
    if (
        not isinstance(value, list)
        or len(value) > most
        or not all(isinstance(v, str) and shape.fullmatch(v) for v in value)
    ):
        raise DevIdpRefused(INVALID_REQUEST, "missing or malformed", field=field)
    return tuple(sorted(set(value)))


def _lifetime(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DevIdpRefused(INVALID_REQUEST, "not an integer", field="lifetime_s")
    if not MIN_LIFETIME_S <= value <= MAX_LIFETIME_S:
        raise DevIdpRefused(INVALID_REQUEST, "out of range", field="lifetime_s")
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise DevIdpRefused(INVALID_REQUEST, "not a boolean", field="expired")
    return value


def check_loopback(host: str) -> None:
    """Raises: DevIdpRefused: DEV_IDP_NOT_LOOPBACK, `host` accepts other machines."""
    if not is_loopback(host):
        raise DevIdpRefused(
            NOT_LOOPBACK,
            f"--host {_shown(host)} is not a loopback address; the development identity "
            "provider listens on 127.0.0.1, ::1 or localhost only: leave --host out (other "
            f"machines need a real identity provider; this one is {NOT_FOR_PRODUCTION})",
        )


class DevIdp:
    """The identity provider: its key, its documents and its tokens (no I/O here)."""

    def __init__(self, issuer: str, audience: str = DEFAULT_AUDIENCE) -> None:
        self.issuer, self.audience = issuer, audience
        # A fresh key each start, never written anywhere.
        self._key = ec.generate_private_key(ec.SECP256R1())
        self.kid = "dev-" + secrets.token_hex(8)
        self.mint_secret = secrets.token_urlsafe(32)

    def metadata(self) -> dict[str, Any]:
        """RFC 8414 authorization-server metadata."""
        return {
            "issuer": self.issuer,
            "jwks_uri": self.issuer + JWKS_PATH,
            # Present because clients' metadata parsers require them; both refuse (no one
            # logs in here): tokens come from `engram-memory gateway dev-idp mint`.
            "authorization_endpoint": self.issuer + "/authorize",
            "token_endpoint": self.issuer + "/token",
            "response_types_supported": [],
            "grant_types_supported": [],
        }

    def jwks(self) -> dict[str, Any]:
        jwk: dict[str, Any] = json.loads(ECAlgorithm.to_jwk(self._key.public_key()))
        jwk.update(kid=self.kid, alg=ALGORITHM, use="sig")
        return {"keys": [jwk]}

    def authorized(self, header: str | None) -> bool:
        """Whether an `Authorization` header carries the mint secret (constant time)."""
        if header is None or not header.startswith("Bearer "):
            return False
        presented = header.removeprefix("Bearer ").encode("utf-8", "replace")
        return hmac.compare_digest(presented, self.mint_secret.encode("ascii"))

    def mint(self, request: TokenRequest, now: float | None = None) -> str:
        """A signed JWT access token with the claims examples/gateway/team-dev.yaml maps."""
        issued = int(time.time() if now is None else now)
        if request.expired:
            issued -= request.lifetime_s + EXPIRED_SINCE_S
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": request.sub,
            "aud": request.audience or self.audience,
            "iat": issued,
            "nbf": issued,
            "exp": issued + request.lifetime_s,
            "tenant": request.tenant,
            "workspace": request.workspace,
            "groups": list(request.groups),
            "azp": request.client,
            "jti": secrets.token_hex(16),
        }
        if request.scope:
            claims["scope"] = " ".join(request.scope)
        return jwt.encode(claims, self._key, algorithm=ALGORITHM, headers={"kid": self.kid})


MintListener = Callable[[TokenRequest, str], None]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    idp: DevIdp
    on_mint: MintListener | None

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up is nobody's failure; no traceback reaches the log


class _Server6(_Server):
    address_family = socket.AF_INET6


def url_host(host: str) -> str:
    """`host` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class DevIdpServer:
    """A `DevIdp` served over HTTP on loopback, in a thread, until `close`. `on_mint` is
    told (subject, groups, kid) of each token minted, never the token."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        audience: str = DEFAULT_AUDIENCE,
        on_mint: MintListener | None = None,
    ) -> None:
        check_loopback(host)
        if not _AUDIENCE.fullmatch(audience):
            raise DevIdpRefused(
                INVALID_REQUEST, "--audience is not an http(s) URL", field="audience"
            )
        bind_host = host.strip("[]")
        if bind_host == "localhost":
            bind_host = "127.0.0.1"
        server_class = _Server6 if ":" in bind_host else _Server
        try:
            if not 0 <= port <= 65535:
                raise OSError(0, "not a port number")
            self._http = server_class((bind_host, port), _Handler)
        except OSError as exc:
            raise DevIdpRefused(
                CANNOT_LISTEN,
                f"cannot listen on {url_host(bind_host)}:{port}: {exc.strerror}; stop what "
                "serves it (another dev-idp?) or pick another --port, and give the gateway's "
                "http.issuer and http.jwks_url that port",
            ) from None
        self.port = int(self._http.server_address[1])
        self.idp = DevIdp(f"http://{url_host(bind_host)}:{self.port}", audience)
        self._http.idp, self._http.on_mint = self.idp, on_mint
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.1,), daemon=True)

    @property
    def issuer(self) -> str:
        return self.idp.issuer

    def start(self) -> DevIdpServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._http.shutdown()
            self._thread.join(timeout=10)
        self._http.server_close()


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0 (the default): one request per connection, so a refused request's unread
    # body can never be taken for the next request.
    server: _Server
    _OAUTH_REFUSAL: ClassVar[dict[str, str]] = {
        "error": "unsupported_grant_type",
        "error_description": "NOT FOR PRODUCTION development IdP: nobody logs in here; "
        "mint a token with `engram-memory gateway dev-idp mint`",
    }

    def do_GET(self) -> None:
        idp = self.server.idp
        if self.path == METADATA_PATH:
            self._answer(200, idp.metadata())
        elif self.path == JWKS_PATH:
            self._answer(200, idp.jwks())
        elif self.path.split("?")[0] == "/authorize":
            self._answer(400, {**self._OAUTH_REFUSAL, "error": "unsupported_response_type"})
        else:
            self._answer(404, {"error": "not_found"})

    def do_POST(self) -> None:
        if self.path == "/token":
            self._answer(400, self._OAUTH_REFUSAL)
        elif self.path == MINT_PATH:
            self._mint()
        else:
            self._answer(404, {"error": "not_found"})

    def _mint(self) -> None:
        idp = self.server.idp
        if not idp.authorized(self.headers.get("Authorization")):
            self._answer(401, {"error": "unauthorized", "code": UNAUTHORIZED})
            return
        try:
            length = int(self.headers.get("Content-Length", "-1"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self._refuse(DevIdpRefused(INVALID_REQUEST, "body missing or too large", field="body"))
            return
        try:
            request = TokenRequest.from_json(json.loads(self.rfile.read(length)))
        except ValueError:  # not JSON (UnicodeDecodeError and JSONDecodeError are both)
            self._refuse(DevIdpRefused(INVALID_REQUEST, "not JSON", field="body"))
            return
        except DevIdpRefused as refused:
            self._refuse(refused)
            return
        token = idp.mint(request)
        if self.server.on_mint is not None:
            self.server.on_mint(request, idp.kid)
        self._answer(200, {"access_token": token, "token_type": "Bearer"})

    def _refuse(self, refused: DevIdpRefused) -> None:
        self._answer(
            400, {"error": "invalid_request", "code": refused.code, "field": refused.field}
        )

    def _answer(self, status: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are not logged: a mint request's header carries the secret
