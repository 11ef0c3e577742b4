"""HTTP limits and exposure settings: safe defaults, flags over environment, one clear
error for a bad value, and no non-loopback bind without allowed names and a TLS choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.transport.http_settings import (
    LOOPBACK_HOSTS,
    LOOPBACK_ORIGINS,
    HttpSettings,
    is_loopback,
    load_http_settings,
)


def test_defaults_are_the_documented_safe_ones_on_loopback() -> None:
    settings = load_http_settings("127.0.0.1", {}, {})
    assert settings == HttpSettings()
    assert settings.max_sessions == 256
    assert settings.max_sessions_per_peer == 32
    assert settings.session_idle_seconds == 600
    assert settings.unbound_session_seconds == 10
    assert settings.header_timeout_seconds == 10
    assert settings.body_timeout_seconds == 30
    assert settings.max_connections == 128
    assert settings.max_connections_per_peer == 32
    assert settings.max_request_bytes == 4 * 1024 * 1024
    assert settings.allowed_hosts == LOOPBACK_HOSTS
    assert settings.allowed_origins == LOOPBACK_ORIGINS
    assert settings.exposure_warning() is None


def test_a_flag_overrides_its_environment_variable() -> None:
    env = {"ENGRAM_HTTP_MAX_SESSIONS": "10", "ENGRAM_HTTP_SESSION_IDLE_MINUTES": "2"}
    settings = load_http_settings("127.0.0.1", {"http_max_sessions": "5"}, env)
    assert settings.max_sessions == 5
    assert settings.session_idle_seconds == 120


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ENGRAM_HTTP_MAX_SESSIONS", "0"),
        ("ENGRAM_HTTP_MAX_SESSIONS", "many"),
        ("ENGRAM_HTTP_MAX_SESSIONS_PER_PEER", "-1"),
        ("ENGRAM_HTTP_MAX_CONNECTIONS", "1.5"),
        ("ENGRAM_HTTP_MAX_CONNECTIONS_PER_PEER", "none"),
        ("ENGRAM_MAX_REQUEST_BYTES", "999999999999"),
        ("ENGRAM_HTTP_SESSION_IDLE_MINUTES", "0"),
        ("ENGRAM_HTTP_UNBOUND_SESSION_SECONDS", "nan"),
        ("ENGRAM_HTTP_HEADER_TIMEOUT_SECONDS", "inf"),
        ("ENGRAM_HTTP_BODY_TIMEOUT_SECONDS", "-3"),
        ("ENGRAM_INSECURE_NO_TLS", "perhaps"),
        ("ENGRAM_TLS_CERT", "/nonexistent/cert.pem"),
    ],
)
def test_a_bad_value_is_a_configuration_error_naming_its_variable(
    variable: str, value: str
) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        load_http_settings("127.0.0.1", {}, {variable: value})


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_addresses_are_recognised(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "mem.example"])  # noqa: S104
def test_other_addresses_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


_EXPOSED = {"ENGRAM_HTTP_ALLOWED_HOSTS": "mem.example:*", "ENGRAM_HTTP_ALLOWED_ORIGINS": "none"}


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "ENGRAM_HTTP_ALLOWED_HOSTS"),
        ({"ENGRAM_HTTP_ALLOWED_HOSTS": "mem.example:*"}, "ENGRAM_HTTP_ALLOWED_ORIGINS"),
        (_EXPOSED, "--insecure-no-tls"),
    ],
)
def test_a_non_loopback_host_needs_allowed_names_and_a_tls_choice(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        load_http_settings("0.0.0.0", {}, env)  # noqa: S104


def test_tls_needs_both_files_and_excludes_the_insecure_acknowledgment(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    with pytest.raises(ConfigurationError, match="together"):
        load_http_settings("0.0.0.0", {"tls_cert": str(cert)}, _EXPOSED)  # noqa: S104
    both = {"tls_cert": str(cert), "tls_key": str(cert), "insecure_no_tls": "true"}
    with pytest.raises(ConfigurationError, match="ENGRAM_INSECURE_NO_TLS"):
        load_http_settings("0.0.0.0", both, _EXPOSED)  # noqa: S104


def test_an_acknowledged_exposure_uses_the_operators_lists_and_warns(tmp_path: Path) -> None:
    settings = load_http_settings(
        "0.0.0.0",  # noqa: S104
        {"insecure_no_tls": "true"},
        {"ENGRAM_HTTP_ALLOWED_HOSTS": "mem.example:*, 10.0.0.5:8765", **_NO_ORIGIN},
    )
    assert settings.allowed_hosts == ("mem.example:*", "10.0.0.5:8765")
    assert settings.allowed_origins == ()
    warning = settings.exposure_warning()
    assert warning is not None
    assert "0.0.0.0" in warning  # noqa: S104
    assert "NO TLS" in warning

    key = tmp_path / "key.pem"
    key.write_text("x")
    with_tls = load_http_settings(
        "0.0.0.0",  # noqa: S104
        {"tls_cert": str(key), "tls_key": str(key)},
        {**_EXPOSED, "ENGRAM_HTTP_ALLOWED_ORIGINS": "https://app.example"},
    )
    assert with_tls.scheme == "https"
    assert with_tls.allowed_origins == ("https://app.example",)


_NO_ORIGIN = {"ENGRAM_HTTP_ALLOWED_ORIGINS": "none"}
