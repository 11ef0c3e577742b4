"""A small OAuth token issuer for the gateway's HTTP tests: its own RSA and EC keys, its JWKS
and its authorization-server metadata served on 127.0.0.1, and `mint` for any token a test
needs, good or bad.

Nothing here is the gateway's code: it plays the organisation's identity provider, so the
gateway's verifier meets real signatures, a real JWKS fetch and real discovery.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

JWKS_PATH = "/jwks.json"
METADATA_PATH = "/.well-known/oauth-authorization-server"


class _Omit:
    """Marks a claim `mint` must leave out (a test of a missing claim)."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT: Any = _Omit()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (a verifier's timeout) is not the test's failure


class _Key:
    def __init__(self, kid: str, alg: str) -> None:
        self.kid, self.alg = kid, alg
        if alg.startswith("ES"):
            self.private: Any = ec.generate_private_key(ec.SECP256R1())
            self.jwk: dict[str, Any] = json.loads(ECAlgorithm.to_jwk(self.private.public_key()))
        else:
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.jwk = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))
        self.jwk.update(kid=kid, alg=alg, use="sig")

    def public_pem(self) -> bytes:
        return bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )


class TokenIssuer:
    """An identity provider on 127.0.0.1:<free port>, serving until `close`.

    `issuer` is its URL (the `iss` it mints and names in its metadata); `jwks_url` its JWKS.
    `jwks_fetches` counts the JWKS requests it answered, so a test can see the gateway's cache.
    """

    def __init__(self, audience: str = "", tenant: str = "acme", workspace: str = "support"):
        self.audience, self.tenant, self.workspace = audience, tenant, workspace
        self._keys = {key.kid: key for key in (_Key("rsa-1", "RS256"), _Key("ec-1", "ES256"))}
        self._published = set(self._keys)
        self.jwks_fetches = 0
        self.jwks_available = True
        # Cleared: JWKS requests hang (an IdP that accepts connections and never answers)
        # until it is set again.
        self.jwks_answering = threading.Event()
        self.jwks_answering.set()
        self._server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )
        self._thread.start()

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def jwks_url(self) -> str:
        return self.issuer + JWKS_PATH

    def close(self) -> None:
        self.jwks_answering.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def add_key(self, kid: str, alg: str = "RS256", *, published: bool = True) -> None:
        """A new signing key (a rotation when `published`, a key the IdP never announced
        when not)."""
        self._keys[kid] = _Key(kid, alg)
        if published:
            self._published.add(kid)

    def private_key(self, kid: str = "rsa-1") -> Any:
        """A signing key of this issuer, to sign under another key's kid."""
        return self._keys[kid].private

    def public_pem(self, kid: str = "rsa-1") -> bytes:
        """A key's public half as PEM: what an attacker trying HS256-with-the-public-key
        confusion would use as the HMAC secret."""
        return self._keys[kid].public_pem()

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self._keys[kid].jwk for kid in sorted(self._published)]}

    def metadata(self) -> dict[str, Any]:
        # RFC 8414 metadata: enough for a client's discovery to find the issuer and its keys.
        return {
            "issuer": self.issuer,
            "jwks_uri": self.jwks_url,
            "authorization_endpoint": self.issuer + "/authorize",
            "token_endpoint": self.issuer + "/token",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "client_credentials"],
            "code_challenge_methods_supported": ["S256"],
        }

    def mint(
        self,
        sub: Any = "alice",
        *,
        aud: Any = None,
        iss: Any = None,
        exp: Any = None,
        iat: Any = None,
        nbf: Any = OMIT,
        tenant: Any = None,
        workspace: Any = None,
        groups: Any = OMIT,
        azp: Any = "desk-client",
        scope: Any = OMIT,
        alg: str = "RS256",
        kid: Any = None,
        key: Any = None,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> str:
        """A signed JWT access token. Defaults: a valid token for `sub` in this issuer's
        tenant/workspace, audience the gateway's, five minutes long, signed with the RSA key.

        Pass `OMIT` to leave a claim out; `kid=OMIT` drops the header's kid; `key` signs with
        something else (bytes for HS*, a private key object) while the header keeps `kid`;
        `alg="none"` makes an unsigned token.
        """
        now = int(time.time())
        signer = self._keys["ec-1" if alg.startswith("ES") else "rsa-1"]
        claims: dict[str, Any] = {
            "iss": self.issuer if iss is None else iss,
            "sub": sub,
            "aud": self.audience if aud is None else aud,
            "iat": now if iat is None else iat,
            "exp": now + 300 if exp is None else exp,
            "nbf": nbf,
            "tenant": self.tenant if tenant is None else tenant,
            "workspace": self.workspace if workspace is None else workspace,
            "groups": groups,
            "azp": azp,
            "scope": scope,
            # Two tokens minted in the same second differ, as an IdP's do.
            "jti": uuid.uuid4().hex,
            **(extra or {}),
        }
        claims = {name: value for name, value in claims.items() if value is not OMIT}
        header: dict[str, Any] = {"kid": signer.kid if kid is None else kid, **(headers or {})}
        if header["kid"] is OMIT:
            del header["kid"]
        if alg == "none":
            return jwt.encode(claims, None, algorithm="none", headers=header)
        if key is None:
            key = self._keys[header["kid"]].private if header.get("kid") in self._keys else signer
            key = key.private if isinstance(key, _Key) else key
        if isinstance(key, bytes) and alg.startswith("HS"):
            return _hmac_token(claims, header, key, alg)
        return jwt.encode(claims, key, algorithm=alg, headers=header)


def _hmac_token(claims: dict[str, Any], header: dict[str, Any], secret: bytes, alg: str) -> str:
    """HS* with any secret, PEM included: PyJWT refuses to encode with a PEM as an HMAC key
    (the very confusion it guards against), so the attacker's token is assembled by hand."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")

    head = b64(json.dumps({"alg": alg, "typ": "JWT", **header}).encode())
    body = b64(json.dumps(claims).encode())
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    signature = hmac.new(secret, f"{head}.{body}".encode(), digest).digest()
    return f"{head}.{body}.{b64(signature)}"


def _handler_for(issuer: TokenIssuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == JWKS_PATH:
                issuer.jwks_fetches += 1
                issuer.jwks_answering.wait(timeout=60)
                if not issuer.jwks_available:
                    self._answer(503, {"error": "temporarily_unavailable"})
                    return
                self._answer(200, issuer.jwks())
            elif self.path in (METADATA_PATH, "/.well-known/openid-configuration"):
                self._answer(200, issuer.metadata())
            else:
                self._answer(404, {"error": "not_found"})

        def _answer(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output to what fails

    return Handler


def running_issuer(audience: str, **kwargs: Any) -> Iterator[TokenIssuer]:
    """A started issuer for a fixture; closed afterwards."""
    issuer = TokenIssuer(audience, **kwargs)
    try:
        yield issuer
    finally:
        issuer.close()
