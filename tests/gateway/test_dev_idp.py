"""The development identity provider (`engram-memory gateway dev-idp`): its request checks,
and the real thing on 127.0.0.1:<free port>, met by the gateway's own verifier (real JWKS
fetch, the claim mapping of examples/gateway/team-dev.yaml) and by the CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from mcp.shared.auth import OAuthMetadata

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.cli.main import main
from engram_memory.contract.exceptions import DevIdpRefused
from engram_memory.gateway import dev_idp
from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.config import load_gateway_config
from engram_memory.gateway.dev_idp import DevIdpServer, TokenRequest
from engram_memory.gateway.dev_idp_mint import (
    DevIdpState,
    read_state,
    remove_state,
    request_token,
    write_state,
)
from engram_memory.gateway.http import token_rules
from engram_memory.gateway.jwks import JwksCache
from engram_memory.gateway.oauth import GatewayAccessToken, JwtVerifier
from tests.gateway.conftest import RESOURCE, Clock, entries

REPO = Path(__file__).resolve().parents[2]
TEAM_DEV = REPO / "examples/gateway/team-dev.yaml"
ENGRAM_MEMORY = str(Path(sys.executable).parent / "engram-memory")


@pytest.fixture
def server() -> Iterator[DevIdpServer]:
    running = DevIdpServer("127.0.0.1", 0).start()
    yield running
    running.close()


@pytest.fixture
def state(server: DevIdpServer, tmp_path: Path) -> Path:
    path = tmp_path / "dev-idp.json"
    write_state(path, DevIdpState(server.issuer, server.idp.mint_secret))
    return path


def _post_mint(server: DevIdpServer, body: Any) -> httpx.Response:
    return httpx.post(
        server.issuer + dev_idp.MINT_PATH,
        content=body if isinstance(body, bytes) else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {server.idp.mint_secret}",
            "Content-Type": "application/json",
        },
        timeout=10,
    )


def _team_dev_verifier(
    server: DevIdpServer, audit: GatewayAudit, monkeypatch: pytest.MonkeyPatch, home: Path
) -> JwtVerifier:
    """The gateway's verifier with examples/gateway/team-dev.yaml's rules (its issuer moved
    to this server's free port)."""
    monkeypatch.setenv("HOME", str(home))
    config = load_gateway_config(TEAM_DEV)
    assert config.http is not None
    assert config.http.issuer == "http://127.0.0.1:8790"
    rules = dataclasses.replace(token_rules(config.http), issuer=server.issuer)
    return JwtVerifier(rules, JwksCache(server.issuer + dev_idp.JWKS_PATH, clock=Clock()), audit)


# The very binds the IdP must refuse.
ALL_INTERFACES = "0.0.0.0"  # noqa: S104


@pytest.mark.parametrize("host", [ALL_INTERFACES, "::", "192.168.1.10", "memory.example.com"])
def test_a_non_loopback_host_is_refused_with_its_code(host: str) -> None:
    with pytest.raises(DevIdpRefused) as refused:
        DevIdpServer(host, 0)
    assert refused.value.code == dev_idp.NOT_LOOPBACK


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_hosts_serve_metadata_naming_the_issuer(host: str) -> None:
    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    running = DevIdpServer(host, 0).start()
    try:
        metadata = httpx.get(running.issuer + dev_idp.METADATA_PATH, timeout=10).json()
    finally:
        running.close()
    assert metadata["issuer"] == running.issuer


def test_the_metadata_is_rfc_8414_and_leads_to_a_jwks_of_one_es256_signing_key(
    server: DevIdpServer,
) -> None:
    answer = httpx.get(server.issuer + dev_idp.METADATA_PATH, timeout=10)
    assert answer.status_code == 200
    # The SDK's own model of RFC 8414 metadata, as an MCP client parses it.
    metadata = OAuthMetadata.model_validate(answer.json())
    assert answer.json()["issuer"] == server.issuer  # exact string: RFC 8414 compares them so
    keys = httpx.get(answer.json()["jwks_uri"], timeout=10).json()["keys"]
    assert [(k["kid"], k["alg"], k["use"], k["kty"]) for k in keys] == [
        (server.idp.kid, "ES256", "sig", "EC")
    ]
    assert "d" not in keys[0]  # the public half only
    for url, method in (
        (metadata.authorization_endpoint, "GET"),
        (metadata.token_endpoint, "POST"),
    ):
        refused = httpx.request(method, str(url), timeout=10)
        assert refused.status_code == 400
        assert refused.json()["error"] in ("unsupported_response_type", "unsupported_grant_type")
    assert httpx.get(server.issuer + "/nothing", timeout=10).status_code == 404


def test_a_port_already_served_is_refused_with_its_code(server: DevIdpServer) -> None:
    with pytest.raises(DevIdpRefused) as refused:
        DevIdpServer("127.0.0.1", server.port)
    assert refused.value.code == dev_idp.CANNOT_LISTEN


def test_two_runs_have_two_keys(server: DevIdpServer) -> None:
    other = DevIdpServer("127.0.0.1", 0)
    try:
        assert other.idp.kid != server.idp.kid
        assert other.idp.jwks() != server.idp.jwks()
        assert other.idp.mint_secret != server.idp.mint_secret
    finally:
        other.close()


async def test_a_minted_token_binds_the_caller_team_dev_yaml_maps(
    server: DevIdpServer,
    state: Path,
    audit: GatewayAudit,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    token = request_token(read_state(state), {"sub": "zoe", "groups": ["support-advisors"]})
    access = await _team_dev_verifier(server, audit, monkeypatch, tmp_path).verify_token(token)
    assert isinstance(access, GatewayAccessToken)
    assert (access.tenant, access.workspace) == ("acme", "support")
    assert (access.principal, access.approver) == ("user:zoe", "human:zoe")
    assert access.agent_id == "agent:dev-client"
    assert access.groups == ("group:support-advisors",)
    assert jwt.decode(token, options={"verify_signature": False})["aud"] == RESOURCE
    assert entries(audit) == []


async def test_expired_and_forged_tokens_are_refused_by_the_gateway_verifier(
    server: DevIdpServer,
    state: Path,
    audit: GatewayAudit,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    verifier = _team_dev_verifier(server, audit, monkeypatch, tmp_path)
    expired = request_token(read_state(state), {"sub": "alice", "expired": True})
    claims = jwt.decode(expired, options={"verify_signature": False})
    forged = jwt.encode(
        {**claims, "exp": claims["exp"] + 7200, "iat": claims["iat"] + 7200},
        ec.generate_private_key(ec.SECP256R1()),
        algorithm="ES256",
        headers={"kid": server.idp.kid},
    )
    assert await verifier.verify_token(expired) is None
    assert await verifier.verify_token(forged) is None
    assert [entry["reason"] for entry in entries(audit)] == ["expired", "bad_signature"]


@pytest.mark.parametrize("authorization", [None, "Bearer not-the-secret", "Basic x", "SECRET"])
def test_mint_without_the_secret_is_refused_401(
    server: DevIdpServer, authorization: str | None
) -> None:
    if authorization == "SECRET":  # the secret, but not as a bearer credential
        authorization = server.idp.mint_secret
    headers = {} if authorization is None else {"Authorization": authorization}
    refused = httpx.post(
        server.issuer + dev_idp.MINT_PATH, json={"sub": "alice"}, headers=headers, timeout=10
    )
    assert refused.status_code == 401
    assert refused.json()["code"] == dev_idp.UNAUTHORIZED
    assert "access_token" not in refused.json()


BAD_REQUESTS: dict[str, tuple[Any, str]] = {
    "no subject": ({}, "sub"),
    "empty subject": ({"sub": ""}, "sub"),
    "subject with a space": ({"sub": "al ice"}, "sub"),
    "subject not a string": ({"sub": 7}, "sub"),
    "wildcard group": ({"sub": "a", "groups": ["support*"]}, "groups"),
    "groups not a list": ({"sub": "a", "groups": "support"}, "groups"),
    "too many groups": ({"sub": "a", "groups": [f"g{i}" for i in range(17)]}, "groups"),
    "bad tenant": ({"sub": "a", "tenant": "Acme Corp"}, "tenant"),
    "bad workspace": ({"sub": "a", "workspace": ""}, "workspace"),
    "audience not http": ({"sub": "a", "audience": "ftp://x/mcp"}, "audience"),
    "client with a newline": ({"sub": "a", "client": "x\ny"}, "client"),
    "scope with a quote": ({"sub": "a", "scope": ['"x']}, "scope"),
    "lifetime too short": ({"sub": "a", "lifetime_s": 59}, "lifetime_s"),
    "lifetime too long": ({"sub": "a", "lifetime_s": 86401}, "lifetime_s"),
    "lifetime a string": ({"sub": "a", "lifetime_s": "3600"}, "lifetime_s"),
    "lifetime a boolean": ({"sub": "a", "lifetime_s": True}, "lifetime_s"),
    "expired not a boolean": ({"sub": "a", "expired": "yes"}, "expired"),
    "unknown field": ({"sub": "a", "role": "admin"}, "role"),
    "unknown field not shown": ({"sub": "a", "r\u00f4le": 1}, "(not shown)"),
    "an array": ([{"sub": "a"}], "body"),
    "not JSON": (b"{sub: a", "body"),
    "not UTF-8": (b"\xff\xfe", "body"),
    "too large": (json.dumps({"sub": "a", "pad": "x" * 9000}).encode(), "body"),
}


@pytest.mark.parametrize("case", BAD_REQUESTS)
def test_a_bad_mint_request_is_refused_400_naming_its_field(
    server: DevIdpServer, case: str
) -> None:
    body, field = BAD_REQUESTS[case]
    refused = _post_mint(server, body)
    assert refused.status_code == 400
    assert refused.json() == {
        "error": "invalid_request",
        "code": dev_idp.INVALID_REQUEST,
        "field": field,
    }


def test_request_defaults_and_an_expired_request_back_date_the_token() -> None:
    idp = dev_idp.DevIdp("http://127.0.0.1:1")
    request = TokenRequest.from_json({"sub": "alice", "groups": ["b", "a", "b"]})
    assert request.groups == ("a", "b")
    fresh = jwt.decode(idp.mint(request, now=1_800_000_000), options={"verify_signature": False})
    assert (fresh["iat"], fresh["exp"]) == (1_800_000_000, 1_800_003_600)
    assert (fresh["tenant"], fresh["workspace"], fresh["azp"]) == ("acme", "support", "dev-client")
    assert "scope" not in fresh
    old = TokenRequest.from_json({"sub": "alice", "expired": True, "scope": ["memory"]})
    stale = jwt.decode(idp.mint(old, now=1_800_000_000), options={"verify_signature": False})
    assert stale["exp"] == 1_800_000_000 - dev_idp.EXPIRED_SINCE_S
    assert stale["scope"] == "memory"


def test_the_state_file_is_private_read_back_and_removed_only_by_its_run(tmp_path: Path) -> None:
    path = tmp_path / "state" / "dev-idp.json"
    mine = DevIdpState("http://127.0.0.1:8790", "secret-one")
    write_state(path, mine)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_state(path) == mine
    theirs = DevIdpState("http://127.0.0.1:8791", "secret-two")
    write_state(path, theirs)
    remove_state(path, mine)
    assert read_state(path) == theirs
    remove_state(path, theirs)
    assert not path.exists()


@pytest.mark.parametrize(
    "content",
    [
        None,
        "{not json",
        json.dumps(["x"]),
        json.dumps({"issuer": "http://127.0.0.1:8790"}),
        # Never sent off this machine, whatever the file says.
        json.dumps({"issuer": "http://idp.example.com", "mint_secret": "s"}),
        json.dumps({"issuer": "https://127.0.0.1:8790", "mint_secret": "s"}),
    ],
)
def test_no_usable_state_file_is_refused_not_running(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "dev-idp.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(DevIdpRefused) as refused:
        read_state(path)
    assert refused.value.code == dev_idp.NOT_RUNNING


def test_request_token_names_what_went_wrong(server: DevIdpServer) -> None:
    good = DevIdpState(server.issuer, server.idp.mint_secret)
    with pytest.raises(DevIdpRefused) as invalid:
        request_token(good, {"sub": "a", "lifetime_s": 5})
    assert (invalid.value.code, invalid.value.field) == (dev_idp.INVALID_REQUEST, "lifetime_s")
    with pytest.raises(DevIdpRefused) as stale:
        request_token(DevIdpState(server.issuer, "another-runs-secret"), {"sub": "a"})
    assert stale.value.code == dev_idp.UNAUTHORIZED
    closed = DevIdpServer("127.0.0.1", 0)
    closed.close()
    with pytest.raises(DevIdpRefused) as unreachable:
        request_token(DevIdpState(closed.issuer, "s"), {"sub": "a"})
    assert unreachable.value.code == dev_idp.UNREACHABLE


def test_cli_mint_prints_the_token_alone(
    server: DevIdpServer, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["gateway", "dev-idp", "mint", "--state", str(state), "--sub", "zoe"]
    argv += ["--group", "support-advisors", "--group", "oncall", "--lifetime", "600"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    claims = jwt.decode(out.strip(), options={"verify_signature": False})
    assert out == out.strip() + "\n"
    assert claims["groups"] == ["oncall", "support-advisors"]
    assert claims["exp"] - claims["iat"] == 600


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["gateway", "dev-idp", "--host", ALL_INTERFACES, "--port", "0"], dev_idp.NOT_LOOPBACK),
        (["gateway", "dev-idp", "--port", "65536"], dev_idp.CANNOT_LISTEN),
        (["gateway", "dev-idp", "--port", "0"], dev_idp.STATE_UNWRITABLE),
        (["gateway", "dev-idp", "mint", "--sub", "a"], dev_idp.NOT_RUNNING),
        (["gateway", "dev-idp", "mint", "--sub", "a b"], dev_idp.INVALID_REQUEST),
    ],
)
def test_cli_refusals_exit_2_with_their_code_and_write_nothing(
    server: DevIdpServer,
    state: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: str,
) -> None:
    chosen = {
        dev_idp.NOT_RUNNING: tmp_path / "absent.json",
        dev_idp.STATE_UNWRITABLE: state / "under-a-file.json",
    }.get(code, state)
    before = sorted(tmp_path.iterdir())
    assert main([*argv, "--state", str(chosen)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f" {code}: " in captured.err
    assert sorted(tmp_path.iterdir()) == before


def test_help_and_the_start_up_line_say_not_for_production(tmp_path: Path) -> None:
    helped = subprocess.run(
        [ENGRAM_MEMORY, "gateway", "dev-idp", "--help"], capture_output=True, text=True, check=True
    )
    assert "NOT FOR PRODUCTION" in helped.stdout
    assert (
        "NOT FOR PRODUCTION"
        in subprocess.run(
            [ENGRAM_MEMORY, "gateway", "--help"], capture_output=True, text=True, check=True
        ).stdout
    )
    state = tmp_path / "dev-idp.json"
    process = subprocess.Popen(
        [ENGRAM_MEMORY, "gateway", "dev-idp", "--port", "0", "--state", str(state)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        started = process.stderr.readline()
        assert "NOT FOR PRODUCTION" in started
        issuer = read_state(state).issuer
        assert issuer in started
        assert httpx.get(issuer + dev_idp.JWKS_PATH, timeout=10).status_code == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert not state.exists()


def test_team_dev_yaml_passes_gateway_check(tmp_path: Path) -> None:
    """The example, as the walk-through uses it: keys from `host init` in HOME, the
    engram-memory of this environment on PATH."""
    init_host_dir(tmp_path / ".engram-team-dev" / "secrets")
    env = {**os.environ, "HOME": str(tmp_path)}
    env["PATH"] = f"{Path(ENGRAM_MEMORY).parent}{os.pathsep}{env.get('PATH', '')}"
    assert shutil.which("engram-memory", path=env["PATH"]) is not None
    checked = subprocess.run(
        [ENGRAM_MEMORY, "gateway", "--config", str(TEAM_DEV), "--check"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
