"""Streamable HTTP limits and exposure: each setting an environment variable with a `serve`
flag (the flag named like the variable without `ENGRAM_`, see config.py's table).

The defaults keep one hostile client from denying service to the others on a loopback
server; binding anywhere else needs the operator to say which Host/Origin headers are
allowed and to choose TLS (certificate and key) or to acknowledge plain HTTP explicitly.
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engram_memory._internal.config_values import boolean as _bool
from engram_memory._internal.config_values import flag_or_env as _flag_or_env
from engram_memory._internal.config_values import given_as as _given_as
from engram_memory.contract.exceptions import ConfigurationError

# SPEC caps an argument object at 1 MiB in compact JCS form; the raw request may escape
# non-ASCII characters (up to 12 bytes for one 4-byte character) and carries the tokens.
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
# Well under the usual 1,024 open-file limit, which uvicorn would otherwise run into.
DEFAULT_MAX_CONNECTIONS = 128
# A quarter: one address alone cannot hold every connection open.
DEFAULT_MAX_CONNECTIONS_PER_PEER = 32
DEFAULT_MAX_SESSIONS = 256
DEFAULT_MAX_SESSIONS_PER_PEER = 32  # sessions not yet bound, per address
DEFAULT_MAX_SESSIONS_PER_PRINCIPAL = 32  # bound sessions, per tenant and principal
DEFAULT_SESSION_IDLE_MINUTES = 10.0
DEFAULT_UNBOUND_SESSION_SECONDS = 10.0
DEFAULT_HEADER_TIMEOUT_SECONDS = 10.0
DEFAULT_BODY_TIMEOUT_SECONDS = 30.0
# The names and origins the SDK accepts on loopback (DNS-rebinding protection).
LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOOPBACK_ORIGINS = tuple(
    f"{scheme}://{host}" for scheme in ("http", "https") for host in LOOPBACK_HOSTS
)
# ENGRAM_HTTP_ALLOWED_ORIGINS=none: no browser origin at all (clients that send no Origin).
NO_ORIGIN = "none"


@dataclass(frozen=True)
class HttpSettings:
    """What `serve --transport http` enforces; the defaults are the safe ones."""

    host: str = "127.0.0.1"
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER
    max_sessions: int = DEFAULT_MAX_SESSIONS
    max_sessions_per_peer: int = DEFAULT_MAX_SESSIONS_PER_PEER
    max_sessions_per_principal: int = DEFAULT_MAX_SESSIONS_PER_PRINCIPAL
    session_idle_seconds: float = DEFAULT_SESSION_IDLE_MINUTES * 60
    unbound_session_seconds: float = DEFAULT_UNBOUND_SESSION_SECONDS
    header_timeout_seconds: float = DEFAULT_HEADER_TIMEOUT_SECONDS
    body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    allowed_origins: tuple[str, ...] = LOOPBACK_ORIGINS
    tls_cert: Path | None = None
    tls_key: Path | None = None
    insecure_no_tls: bool = False

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert is not None else "http"

    def exposure_warning(self) -> str | None:
        """The line to log when the server is reachable beyond this machine, else None."""
        if self.loopback:
            return None
        protection = (
            "TLS"
            if self.tls_cert is not None
            else "NO TLS (--insecure-no-tls): traffic and tokens in clear"
        )
        origins = ", ".join(self.allowed_origins) or "none"
        return (
            f"warning: MCP over HTTP is exposed on {self.host} with {protection}; "
            f"allowed hosts: {', '.join(self.allowed_hosts)}; allowed origins: {origins}"
        )


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or `localhost`) only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _count(text: str | None, name: str, default: int, upper: int) -> int:
    if text is None or not text.strip():
        return default
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= upper:
        raise ConfigurationError(f"{name} must be a whole number from 1 to {upper}, got {text!r}")
    return value


def _duration(text: str | None, name: str, default: float, upper: float) -> float:
    if text is None or not text.strip():
        return default
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= upper):
        raise ConfigurationError(
            f"{name} must be a number above 0 and at most {upper:g}, got {text!r}"
        )
    return value


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (text or "").split(",") if part.strip())


def _file(text: str | None, name: str) -> Path | None:
    if text is None or not text.strip():
        return None
    path = Path(text).expanduser()
    if not path.is_file():
        raise ConfigurationError(f"{name} points to {path}, which is not a readable file")
    return path


def _exposure(
    host: str, hosts: tuple[str, ...], origins: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The Host/Origin allow-lists: the operator's, which off loopback must be given."""
    if not is_loopback(host):
        if not hosts:
            raise ConfigurationError(
                f"--host {host} is not loopback: set ENGRAM_HTTP_ALLOWED_HOSTS "
                "(--http-allowed-hosts) to the Host names clients use"
            )
        if not origins:
            raise ConfigurationError(
                f"--host {host} is not loopback: set ENGRAM_HTTP_ALLOWED_ORIGINS "
                f"(--http-allowed-origins) to the allowed browser origins, or to '{NO_ORIGIN}'"
            )
    allowed_hosts = hosts or LOOPBACK_HOSTS
    if origins == (NO_ORIGIN,):
        return allowed_hosts, ()
    return allowed_hosts, origins or LOOPBACK_ORIGINS


def load_max_request_bytes(
    flags: Mapping[str, str | None] | None = None, env: Mapping[str, str] | None = None
) -> int:
    """The request size cap, which stdio applies to a line as HTTP does to a body.

    Raises:
        ConfigurationError: the value is not a whole number from 1 to 256 MiB.
    """
    return _count(
        _flag_or_env(flags or {}, os.environ if env is None else env, "ENGRAM_MAX_REQUEST_BYTES"),
        _given_as(flags or {}, "ENGRAM_MAX_REQUEST_BYTES"),
        DEFAULT_MAX_REQUEST_BYTES,
        256 * 1024 * 1024,
    )


def load_http_settings(
    host: str,
    flags: Mapping[str, str | None] | None = None,
    env: Mapping[str, str] | None = None,
) -> HttpSettings:
    """Resolve the HTTP settings for a server listening on `host`: flags over environment
    over defaults.

    Raises:
        ConfigurationError: the first unusable value, named; or a non-loopback `host` without
            allowed hosts and origins, or without TLS or the explicit `--insecure-no-tls`.
    """
    flags = flags or {}
    env = os.environ if env is None else env

    def value(name: str) -> str | None:
        return _flag_or_env(flags, env, name)

    def said(name: str) -> str:
        return _given_as(flags, name)

    allowed_hosts, allowed_origins = _exposure(
        host,
        _names(value("ENGRAM_HTTP_ALLOWED_HOSTS")),
        _names(value("ENGRAM_HTTP_ALLOWED_ORIGINS")),
    )
    cert = _file(value("ENGRAM_TLS_CERT"), said("ENGRAM_TLS_CERT"))
    key = _file(value("ENGRAM_TLS_KEY"), said("ENGRAM_TLS_KEY"))
    if (cert is None) != (key is None):
        raise ConfigurationError("ENGRAM_TLS_CERT and ENGRAM_TLS_KEY must be given together")
    insecure = _bool(value("ENGRAM_INSECURE_NO_TLS") or "false", "ENGRAM_INSECURE_NO_TLS")
    if insecure and cert is not None:
        raise ConfigurationError("ENGRAM_INSECURE_NO_TLS contradicts ENGRAM_TLS_CERT: choose one")
    if not is_loopback(host) and cert is None and not insecure:
        raise ConfigurationError(
            f"--host {host} is not loopback: give --tls-cert and --tls-key "
            "(ENGRAM_TLS_CERT, ENGRAM_TLS_KEY) or acknowledge plain HTTP with --insecure-no-tls"
        )
    return HttpSettings(
        host=host,
        max_request_bytes=load_max_request_bytes(flags, env),
        max_connections=_count(
            value("ENGRAM_HTTP_MAX_CONNECTIONS"),
            said("ENGRAM_HTTP_MAX_CONNECTIONS"),
            DEFAULT_MAX_CONNECTIONS,
            100_000,
        ),
        max_connections_per_peer=_count(
            value("ENGRAM_HTTP_MAX_CONNECTIONS_PER_PEER"),
            said("ENGRAM_HTTP_MAX_CONNECTIONS_PER_PEER"),
            DEFAULT_MAX_CONNECTIONS_PER_PEER,
            100_000,
        ),
        max_sessions=_count(
            value("ENGRAM_HTTP_MAX_SESSIONS"),
            said("ENGRAM_HTTP_MAX_SESSIONS"),
            DEFAULT_MAX_SESSIONS,
            100_000,
        ),
        max_sessions_per_peer=_count(
            value("ENGRAM_HTTP_MAX_SESSIONS_PER_PEER"),
            said("ENGRAM_HTTP_MAX_SESSIONS_PER_PEER"),
            DEFAULT_MAX_SESSIONS_PER_PEER,
            100_000,
        ),
        max_sessions_per_principal=_count(
            value("ENGRAM_HTTP_MAX_SESSIONS_PER_PRINCIPAL"),
            "ENGRAM_HTTP_MAX_SESSIONS_PER_PRINCIPAL",
            DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            100_000,
        ),
        session_idle_seconds=60
        * _duration(
            value("ENGRAM_HTTP_SESSION_IDLE_MINUTES"),
            said("ENGRAM_HTTP_SESSION_IDLE_MINUTES"),
            DEFAULT_SESSION_IDLE_MINUTES,
            24 * 60,
        ),
        unbound_session_seconds=_duration(
            value("ENGRAM_HTTP_UNBOUND_SESSION_SECONDS"),
            said("ENGRAM_HTTP_UNBOUND_SESSION_SECONDS"),
            DEFAULT_UNBOUND_SESSION_SECONDS,
            3600,
        ),
        header_timeout_seconds=_duration(
            value("ENGRAM_HTTP_HEADER_TIMEOUT_SECONDS"),
            said("ENGRAM_HTTP_HEADER_TIMEOUT_SECONDS"),
            DEFAULT_HEADER_TIMEOUT_SECONDS,
            3600,
        ),
        body_timeout_seconds=_duration(
            value("ENGRAM_HTTP_BODY_TIMEOUT_SECONDS"),
            said("ENGRAM_HTTP_BODY_TIMEOUT_SECONDS"),
            DEFAULT_BODY_TIMEOUT_SECONDS,
            3600,
        ),
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        tls_cert=cert,
        tls_key=key,
        insecure_no_tls=insecure,
    )
