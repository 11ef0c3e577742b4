"""Identifiers and log lines against the real processes (issue 23, finding 8 a, b and c).

- An identifier with a control character (a tenant `acme\\n`, a principal holding an ANSI
  escape, ...) in a host-signed invocation context is an invalid binding (-32603) at the real
  `serve`; in a bearer token it is a 401 `token_refused`/`malformed` at the real gateway.
  Shapes are matched whole (`fullmatch`): Python's `$` accepts a trailing newline.
- A bearer token living longer than `http.max_token_lifetime_s` (24 h by default) is a 401
  `token_refused`/`lifetime_too_long`.
- A `Host` or `Origin` holding control characters (raw C1 bytes: an 8-bit CSI) reaches the
  log escaped, never verbatim: a terminal showing the gateway's log is not rewritten.
"""

from __future__ import annotations

import json
import socket
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from engram_memory.client.reference_host import mint_for
from tests.adversarial.wire import ALICE, Secrets, make_secrets, raw_stdio, search_call
from tests.e2e.test_gateway_http import INITIALIZE, TeamGateway, post_initialize, team_gateway

# (claim, hostile value) of a host-signed invocation context
_HOSTILE_CLAIMS: dict[str, tuple[str, str]] = {
    "tenant_newline": ("tenant", "acme\n"),
    "workspace_newline": ("workspace", "support\n"),
    "principal_ansi": ("principal", "user:alice\x1b[31m"),
    "principal_c1_csi": ("principal", "user:alice\x9b31m"),
    "agent_newline": ("agent_id", "agent:desk\n"),
    "session_bidi": ("session", "session:\u202eevil"),
    "purpose_newline": ("purpose_ref", ALICE.purpose_ref + "\n"),
}


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Secrets:
    return make_secrets(tmp_path_factory.mktemp("identifiers"))


def test_an_invocation_context_with_a_control_character_in_any_identifier_is_refused(
    secrets: Secrets,
) -> None:
    with raw_stdio(secrets.env) as serve:
        for number, (claim, value) in enumerate(_HOSTILE_CLAIMS.values(), start=1):
            token = mint_for(secrets.signer, replace(ALICE, **{claim: value}))
            answer = serve.exchange(search_call(number, token))
            assert answer["error"]["code"] == -32603, claim
        honest = serve.exchange(search_call(99, secrets.token()))
        assert honest["result"]["structuredContent"]["ok"] is True


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TeamGateway, Path]]:
    directory = tmp_path_factory.mktemp("team-logs")
    log_path = directory / "gateway.log"
    with log_path.open("wb") as log, team_gateway(directory, stderr=log) as gateway:
        yield gateway, log_path


@pytest.mark.parametrize(
    "claims",
    [{"tenant": "acme\n"}, {"workspace": "support\n"}, {"sub": "alice\x1b[31m"}],
    ids=["tenant_newline", "workspace_newline", "subject_ansi"],
)
def test_a_bearer_token_with_a_control_character_in_its_binding_is_401_malformed(
    team: tuple[TeamGateway, Path], claims: dict[str, str]
) -> None:
    gateway, _log = team
    refused = post_initialize(gateway, gateway.issuer.mint(**claims))
    assert refused.status_code == 401
    last = gateway.gateway_audit()[-1]
    assert (last["event"], last["reason"]) == ("token_refused", "malformed")


def test_a_bearer_token_living_longer_than_a_day_is_401_lifetime_too_long(
    team: tuple[TeamGateway, Path],
) -> None:
    """Finding 8 a: a 10-year `exp` was accepted. The default ceiling is 24 h."""
    gateway, _log = team
    now = int(time.time())
    ten_years, a_day_and_an_hour = now + 10 * 365 * 86_400, now + 25 * 3600
    for exp in (ten_years, a_day_and_an_hour):
        refused = post_initialize(gateway, gateway.issuer.mint(iat=now, exp=exp))
        assert refused.status_code == 401
        last = gateway.gateway_audit()[-1]
        assert (last["event"], last["reason"]) == ("token_refused", "lifetime_too_long")
    within = post_initialize(gateway, gateway.issuer.mint(iat=now, exp=now + 23 * 3600))
    assert within.status_code == 200


_INITIALIZE = json.dumps(
    {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE}
).encode()


def _controls(text: str) -> list[str]:
    return [c for c in text if c not in "\n" and unicodedata.category(c) == "Cc"]


def test_control_characters_in_host_and_origin_reach_the_log_escaped(
    team: tuple[TeamGateway, Path],
) -> None:
    gateway, log_path = team
    port = int(gateway.resource.split(":")[2].split("/")[0])
    token = gateway.issuer.mint("alice")
    # 0x9b is the 8-bit CSI: `\x9b2J` clears a terminal that honours C1 controls; HTTP
    # carries it as an obs-text byte, which servers decode as Latin-1.
    for host, origin in [
        (b"evil\x9b2J.example", b"http://127.0.0.1"),
        (b"127.0.0.1", b"http://evil\x9b31m.example"),
    ]:
        refused = _raw_post(port, token, host, origin)
        assert refused.split(b" ")[1] in (b"401", b"403", b"421")
    stopped = gateway.stop()
    assert stopped == 0
    text = log_path.read_bytes().decode("utf-8")
    assert _controls(text) == []
    assert "\\x9b" in text  # the header was logged, escaped


def _raw_post(port: int, token: str, host: bytes, origin: bytes) -> bytes:
    """The status line of a raw POST with these Host and Origin bytes and a valid bearer (so
    the Host/Origin check, behind the bearer check, is reached)."""
    request = (
        b"POST /mcp HTTP/1.1\r\nHost: " + host + b"\r\nOrigin: " + origin + b"\r\n"
        b"Authorization: Bearer " + token.encode() + b"\r\n"
        b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_INITIALIZE), _INITIALIZE)
    )
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer.split(b"\r\n", 1)[0]
