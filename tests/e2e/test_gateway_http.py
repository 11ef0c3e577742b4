"""The gateway as a team meets it: `engram-memory gateway --config team.yaml` (mode http), a
real `engram-memory serve` child behind it, the real MCP SDK client over streamable HTTP with
bearer tokens from a local issuer (its own keys, its JWKS on 127.0.0.1).

Each refusal is asserted twice: by what the client sees (HTTP status, `WWW-Authenticate`,
JSON-RPC code) and by the gateway audit entry's reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
import yaml
from mcp import Client, MCPError
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import server_env, wait_until_listening
from tests.e2e.gateway_support import (
    PURPOSE,
    SERVE_STDIO,
    GatewaySetup,
    code,
    forget_arguments,
    remembered,
    value,
)
from tests.gateway.token_issuer import OMIT, TokenIssuer
from tests.servers import free_port

pytestmark = pytest.mark.e2e

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
MCP_ACCEPT = "application/json, text/event-stream"


@dataclass
class TeamGateway:
    """A running team gateway, its issuer, and the files an operator would look at
    (`setup.gateway_audit()` any time, `setup.upstream_audit()` once stopped)."""

    setup: GatewaySetup
    issuer: TokenIssuer
    resource: str
    process: subprocess.Popen[bytes]

    @property
    def origin(self) -> str:
        return self.resource.removesuffix("/mcp")

    def gateway_audit(self) -> list[dict[str, Any]]:
        return self.setup.gateway_audit()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        return self.process.wait(timeout=30)


@contextmanager
def team_gateway(
    directory: Path, http_extra: dict[str, Any] | None = None, stderr: Any = None
) -> Iterator[TeamGateway]:
    """Secrets, an issuer and `team.yaml` in `directory`; the gateway started from it.
    `http_extra` adds keys to the `http` section; `stderr` is where its log goes (ours)."""
    root_key, signing_key, public_keys = init_host_dir(directory / "secrets")
    env = server_env(directory / "data", root_key, public_keys)
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    issuer = TokenIssuer(resource)
    document = {
        "mode": "http",
        "host_id": "host:gateway-team",
        "signing_key": str(signing_key),
        "audit_log": "gateway-audit.jsonl",
        "upstream": {
            "command": SERVE_STDIO,
            "env": env,
            "timeout_s": 30,
        },
        "confirmation": {"timeout_s": 30},
        "http": {
            "listen": {"host": "127.0.0.1", "port": port},
            "resource": resource,
            "issuer": issuer.issuer,
            "jwks_url": issuer.jwks_url,
            "algorithms": ["RS256", "ES256"],
            "claims": {
                "principal": {"claim": "sub", "prefix": "user:"},
                "tenant": {"claim": "tenant"},
                "workspace": {"claim": "workspace"},
                "groups": {"claim": "groups", "prefix": "group:"},
            },
            "scopes": [{"tenant": "acme", "workspace": "support", "purposes": [PURPOSE]}],
            **(http_extra or {}),
        },
    }
    config = directory / "team.yaml"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    command = [sys.executable, "-m", "engram_memory.cli", "gateway", "--config", str(config)]
    process = subprocess.Popen(command, env=dict(os.environ), stderr=stderr)
    setup = GatewaySetup(config, directory / "data", directory / "gateway-audit.jsonl", env)
    gateway = TeamGateway(setup, issuer, resource, process)
    try:
        wait_until_listening(resource, process)
        yield gateway
    finally:
        gateway.stop()
        issuer.close()


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamGateway]:
    with team_gateway(tmp_path_factory.mktemp("team")) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def foreign() -> Iterator[TokenIssuer]:
    issuer = TokenIssuer()
    yield issuer
    issuer.close()


class Human:
    """The person behind the client: answers every confirmation the same way and keeps
    what they were shown."""

    def __init__(self, action: str) -> None:
        self.action = action
        self.shown: list[str] = []

    async def __call__(
        self, _ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.shown.append(params.message)
        if self.action == "accept":
            return types.ElicitResult(action="accept", content={"confirm": True})
        return types.ElicitResult(action="decline")


@asynccontextmanager
async def member(
    gateway: TeamGateway, token: str, *, mode: str = "legacy", elicit: Any = None
) -> AsyncIterator[Client]:
    """The SDK client with `Authorization: Bearer <token>` on every request."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(gateway.resource, http_client=http)
    async with Client(transport, mode=mode, elicitation_callback=elicit, cache=None) as client:
        yield client


def post_initialize(gateway: TeamGateway, token: str | None) -> httpx.Response:
    headers = {"Accept": MCP_ACCEPT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(gateway.resource, json=INITIALIZE, headers=headers, timeout=10)


def test_a_request_without_a_token_is_401_pointing_at_the_metadata_that_names_the_issuer(
    team: TeamGateway,
) -> None:
    refused = post_initialize(team, None)
    assert refused.status_code == 401
    metadata_url = f"{team.origin}/.well-known/oauth-protected-resource/mcp"
    challenge = refused.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{metadata_url}"' in challenge
    metadata = httpx.get(metadata_url, timeout=10).json()
    assert metadata["resource"] == team.resource
    assert metadata["authorization_servers"] == [team.issuer.issuer]
    # What a client does next: the issuer's own metadata leads to its keys.
    issuer_metadata = httpx.get(
        metadata["authorization_servers"][0] + "/.well-known/oauth-authorization-server",
        timeout=10,
    ).json()
    assert issuer_metadata["issuer"] == team.issuer.issuer
    assert issuer_metadata["jwks_uri"] == team.issuer.jwks_url


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_member_lists_captures_searches_and_gets_with_a_bearer_token(
    team: TeamGateway, mode: str
) -> None:
    text = f"Refund approved for ticket {uuid.uuid4().hex[:8]}."
    async with member(team, team.issuer.mint("alice"), mode=mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert "engram_memory_forget" in names
        assert len(names) == 6
        record_id = await remembered(client, text)
        found = value(
            await client.call_tool("engram_memory_search", {"query": text, "purpose_ref": PURPOSE})
        )
        assert record_id in [hit["record"]["record_id"] for hit in found["records"]]
        got = value(
            await client.call_tool(
                "engram_memory_get", {"record_id": record_id, "purpose_ref": PURPOSE}
            )
        )
        assert got["record"]["record_id"] == record_id


def _bad_tokens(issuer: TokenIssuer, foreign: TokenIssuer) -> dict[str, tuple[str, str]]:
    now = int(time.time())
    return {
        "bad signature": (issuer.mint(key=foreign.private_key()), "bad_signature"),
        "another issuer": (foreign.mint(aud=issuer.audience), "wrong_issuer"),
        "another issuer's key under our name": (
            foreign.mint(iss=issuer.issuer, aud=issuer.audience),
            "bad_signature",
        ),
        "wrong audience": (issuer.mint(aud="https://other.example/mcp"), "wrong_audience"),
        "expired": (issuer.mint(iat=now - 900, exp=now - 600), "expired"),
        "alg none": (issuer.mint(alg="none"), "algorithm_refused"),
        "HS256 keyed with the public key": (
            issuer.mint(alg="HS256", key=issuer.public_pem()),
            "algorithm_refused",
        ),
        "unknown kid": (issuer.mint(kid="never-published"), "unknown_key"),
        "other tenant": (issuer.mint(tenant="globex", workspace="main"), "scope_not_served"),
        "no subject": (issuer.mint(sub=OMIT), "missing_claim"),
        "malformed groups": (issuer.mint(groups=["support*"]), "malformed"),
        "not a JWT": ("not-a-jwt", "malformed"),
    }


def test_every_bad_token_is_refused_401_and_audited_with_its_reason(
    team: TeamGateway, foreign: TokenIssuer
) -> None:
    cases = _bad_tokens(team.issuer, foreign)
    for name, (token, reason) in cases.items():
        refused = post_initialize(team, token)
        assert refused.status_code == 401, name
        assert "resource_metadata=" in refused.headers["www-authenticate"], name
        last = team.gateway_audit()[-1]
        assert (last["event"], last["reason"]) == ("token_refused", reason), name
    audit_text = team.setup.audit_log.read_text(encoding="utf-8")
    assert all(token not in audit_text for token, _reason in cases.values())


async def test_the_sdk_client_with_a_refused_token_gets_no_tool(
    team: TeamGateway,
) -> None:
    token = team.issuer.mint(tenant="globex", workspace="main")
    with pytest.raises(BaseException):  # noqa: B017, PT011 - the SDK's own error type
        async with member(team, token) as client:
            await client.list_tools()
    assert team.gateway_audit()[-1]["reason"] == "scope_not_served"


async def test_the_groups_claim_reaches_the_group_grants_of_the_policy(team: TeamGateway) -> None:
    # user:zoe has no grant by name; acme grants group:support-advisors the reader role.
    advisor = team.issuer.mint("zoe", groups=["support-advisors"])
    async with member(team, advisor) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == {"engram_memory_search", "engram_memory_get"}
        value(
            await client.call_tool(
                "engram_memory_search", {"query": "refund", "purpose_ref": PURPOSE}
            )
        )
    async with member(team, team.issuer.mint("zoe")) as client:
        assert (await client.list_tools()).tools == []


async def test_a_purpose_outside_the_scopes_purposes_is_refused_32603_and_audited(
    team: TeamGateway,
) -> None:
    async with member(team, team.issuer.mint("alice")) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool(
                "engram_memory_search", {"query": "refund", "purpose_ref": "purpose:marketing"}
            )
    assert refused.value.error.code == -32603
    last = team.gateway_audit()[-1]
    assert (last["event"], last["reason"]) == ("caller_refused", "purpose_not_allowed")


async def test_forget_is_sent_only_after_the_human_accepts_and_names_them_approver(
    tmp_path: Path,
) -> None:
    with team_gateway(tmp_path) as gateway:
        token = gateway.issuer.mint("alice")
        no, yes = Human("decline"), Human("accept")
        async with member(gateway, token, elicit=no) as client:
            record_id = await remembered(client, "Forget me if a human says so.")
            arguments = forget_arguments(record_id)
            declined = await client.call_tool("engram_memory_forget", arguments)
            assert code(declined) == "gate_failed"
        assert gateway.gateway_audit()[-1]["reason"] == "declined"
        async with member(gateway, token, elicit=yes) as client:
            forgotten = await client.call_tool("engram_memory_forget", forget_arguments(record_id))
            value(forgotten)
        assert gateway.gateway_audit()[-1]["reason"] == "accepted"
        assert "engram_memory_forget" in yes.shown[0]
        assert record_id in yes.shown[0]
        assert len(no.shown) == 1
        assert gateway.stop() == 0
        forgets = [
            row for row in gateway.setup.upstream_audit() if row[0] == "engram_memory_forget"
        ]
    # The decline sent nothing: the store saw one forget, released by alice.
    assert len(forgets) == 1
    assert forgets[0][2] == "human:alice"


def test_another_members_token_cannot_ride_an_open_session(team: TeamGateway) -> None:
    opened = post_initialize(team, team.issuer.mint("alice"))
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    list_tools = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    headers = {
        "Accept": MCP_ACCEPT,
        "Mcp-Session-Id": session,
        "Mcp-Protocol-Version": "2025-06-18",
        "Authorization": f"Bearer {team.issuer.mint('bob')}",
    }
    hijack = httpx.post(team.resource, json=list_tools, headers=headers, timeout=10)
    assert hijack.status_code == 404  # as if the session did not exist


def test_a_stop_while_the_upstream_is_still_starting_exits_cleanly(tmp_path: Path) -> None:
    # SIGTERM right after the gateway listens: the upstream child is still starting. The
    # gateway must end it and exit 0, not wait on a connection nobody will use.
    with team_gateway(tmp_path) as gateway:
        assert gateway.stop() == 0


async def test_a_2026_era_client_confirms_a_forget_through_input_required(
    team: TeamGateway,
) -> None:
    # No MCP session over HTTP in this era: the sealed request state binds the session the
    # gateway derives from the bearer token, which the retry carries again.
    token = team.issuer.mint("alice")
    yes = Human("accept")
    async with member(team, token, mode="auto", elicit=yes) as client:
        record_id = await remembered(client, "Forget me in the new protocol era.")
        value(await client.call_tool("engram_memory_forget", forget_arguments(record_id)))
    assert len(yes.shown) == 1
    last = team.gateway_audit()[-1]
    assert (last["event"], last["reason"], last["target"]) == (
        "confirmation",
        "accepted",
        record_id,
    )
