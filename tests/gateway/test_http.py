"""Team mode's HTTP surface in-process: the SDK's resource-server answers as the gateway
configures them (the end-to-end file drives the real process; this covers what needs a
configuration that one does not have, like required scopes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.cli.main import main
from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.config import GatewayConfig, load_gateway_config
from engram_memory.gateway.http import endpoint_path, gateway_app, http_settings
from engram_memory.gateway.upstream import Upstream
from tests.gateway.conftest import RESOURCE
from tests.gateway.token_issuer import TokenIssuer


def team_config(directory: Path, issuer: TokenIssuer, **http: Any) -> GatewayConfig:
    _root, signing_key, _public = init_host_dir(directory / "secrets")
    document = {
        "mode": "http",
        "host_id": "host:gateway-team",
        "signing_key": str(signing_key),
        "audit_log": "gateway-audit.jsonl",
        # Never reached: every request below is answered before a tool call.
        "upstream": {"url": "http://127.0.0.1:9/mcp"},
        "http": {
            "resource": RESOURCE,
            "issuer": issuer.issuer,
            "jwks_url": issuer.jwks_url,
            "scopes": [
                {"tenant": "acme", "workspace": "support", "purposes": ["purpose:support-case"]}
            ],
            **http,
        },
    }
    path = directory / "team.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return load_gateway_config(path)


def client_of(config: GatewayConfig, audit: GatewayAudit) -> httpx.AsyncClient:
    assert config.http is not None
    app = gateway_app(config, Upstream(config.upstream), audit, http_settings(config.http))
    origin = RESOURCE.removesuffix("/mcp")
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=origin)


def test_the_endpoint_is_the_resource_urls_path() -> None:
    assert endpoint_path("https://memory.example.com/team/mcp") == "/team/mcp"
    assert endpoint_path("https://memory.example.com/mcp/") == "/mcp"
    assert endpoint_path("https://memory.example.com") == "/mcp"


def test_listening_off_loopback_without_allowed_hosts_refuses_to_start(
    tmp_path: Path, issuer: TokenIssuer
) -> None:
    exposed = team_config(tmp_path, issuer, listen={"host": "192.0.2.10", "port": 8787})
    assert exposed.http is not None
    with pytest.raises(ConfigurationError):
        http_settings(exposed.http)
    # `--check` says so too, before anything would start.
    assert main(["gateway", "--config", str(tmp_path / "team.yaml"), "--check"]) == 2
    named = team_config(
        tmp_path, issuer, listen={"host": "192.0.2.10"}, allowed_hosts=["memory.example.com"]
    )
    assert named.http is not None
    assert http_settings(named.http).allowed_hosts == ("memory.example.com",)
    assert main(["gateway", "--config", str(tmp_path / "team.yaml"), "--check"]) == 0


async def test_a_token_lacking_a_required_scope_is_403_insufficient_scope_and_audited(
    tmp_path: Path, issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    config = team_config(tmp_path, issuer, required_scopes=["memory"])
    async with client_of(config, audit) as client:
        metadata = (await client.get("/.well-known/oauth-protected-resource/mcp")).json()
        assert metadata["scopes_supported"] == ["memory"]
        headers = {"Authorization": f"Bearer {issuer.mint(scope='openid')}"}
        refused = await client.post("/mcp", json={}, headers=headers)
    assert refused.status_code == 403
    assert 'error="insufficient_scope"' in refused.headers["www-authenticate"]
    last = json.loads(audit.path.read_text().splitlines()[-1])
    assert (last["event"], last["reason"]) == ("token_refused", "insufficient_scope")


async def test_the_metadata_names_the_issuer_exactly_as_configured(
    tmp_path: Path, issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    config = team_config(tmp_path, issuer)
    async with client_of(config, audit) as client:
        metadata = (await client.get("/.well-known/oauth-protected-resource/mcp")).json()
    # No "/" added: RFC 8414 clients compare the issuer as an exact string.
    assert metadata["authorization_servers"] == [issuer.issuer]
    assert metadata["resource"] == RESOURCE
