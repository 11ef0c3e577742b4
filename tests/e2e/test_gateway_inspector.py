"""A stock MCP client, the MCP Inspector's CLI from the npm registry, drives `engram-memory
gateway` over stdio (the Inspector launches the gateway from the documented `mcpServers` entry,
and the gateway launches the real server) and
over OAuth-protected streamable HTTP (a token from a local issuer sent as a bearer header).

Assertions read the JSON the CLI prints: its exit code, the error envelope's `code`, and the
engram-memory envelope's `ok`, `status` and error `code`, never message text.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from tests.e2e.gateways import (
    BIN_PLACEHOLDER,
    CONFIG_PLACEHOLDER,
    ENGRAM_MEMORY,
    PURPOSE,
    audit_events,
    http_gateway,
    reserve_port,
    write_http_config,
    write_stdio_config,
)
from tests.e2e.inspector import (
    EXIT_AUTH_REQUIRED,
    EXIT_OK,
    InspectorRun,
    pinned_version,
    run_inspector,
    tool_call_args,
)
from tests.gateway.token_issuer import TokenIssuer

pytestmark = pytest.mark.e2e

EXAMPLE_ENTRY = Path(__file__).resolve().parents[2] / "examples/host/mcp-servers.json"
SIX_TOOLS = {
    "engram_memory_capture",
    "engram_memory_request_admission",
    "engram_memory_search",
    "engram_memory_get",
    "engram_memory_withdraw",
    "engram_memory_forget",
}


@dataclass(frozen=True)
class Target:
    """How the Inspector reaches a gateway: the CLI flags naming it, and its HOME."""

    flags: tuple[str, ...]
    home: Path

    def run(self, *args: str) -> InspectorRun:
        return run_inspector([*args, *self.flags], home=self.home)


@pytest.fixture
def stdio_target(tmp_path: Path, host_secrets: tuple[Path, Path, Path]) -> Target:
    """The Inspector reading the documented desktop entry (examples/host/mcp-servers.json,
    the clients page's Claude Desktop block) from a file, placeholders filled in, as its config."""
    config = write_stdio_config(tmp_path, tmp_path / "data", host_secrets)
    entry = (
        EXAMPLE_ENTRY.read_text(encoding="utf-8")
        .replace(BIN_PLACEHOLDER, ENGRAM_MEMORY)
        .replace(CONFIG_PLACEHOLDER, str(config))
    )
    servers = tmp_path / "claude_desktop_config.json"
    servers.write_text(entry, encoding="utf-8")
    return Target(("--config", str(servers), "--server", "engram-memory"), _home(tmp_path))


@pytest.fixture(scope="module")
def issuer() -> Iterator[TokenIssuer]:
    issuer = TokenIssuer()
    try:
        yield issuer
    finally:
        issuer.close()


@dataclass(frozen=True)
class Team:
    """A running team gateway: its MCP URL and its config file (the audit log is beside it)."""

    url: str
    config: Path


@pytest.fixture(scope="module")
def team(
    tmp_path_factory: pytest.TempPathFactory,
    host_secrets: tuple[Path, Path, Path],
    issuer: TokenIssuer,
) -> Iterator[Team]:
    """One team gateway for the module's HTTP tests (each test uses its own texts)."""
    directory = tmp_path_factory.mktemp("team")
    port = reserve_port()
    issuer.audience = f"http://127.0.0.1:{port}/mcp"
    config = write_http_config(
        directory,
        directory / "data",
        host_secrets,
        port=port,
        issuer=issuer.issuer,
        jwks_url=issuer.jwks_url,
    )
    with http_gateway(config, port) as url:
        yield Team(url, config)


def _http_target(tmp_path: Path, url: str, *headers: str) -> Target:
    # --stored-auth-only: never start an interactive OAuth login (it would wait for a browser).
    flags = [url, "--transport", "http", "--stored-auth-only"]
    for header in headers:
        flags += ["--header", header]
    return Target(tuple(flags), _home(tmp_path))


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return home


def _listed_tools(target: Target) -> set[str]:
    run = target.run("--method", "tools/list")
    assert run.exit_code == EXIT_OK, run.error
    return {tool["name"] for tool in run.output["tools"]}


def _call(target: Target, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return target.run(*tool_call_args(tool, arguments)).tool_envelope()


def _value(envelope: dict[str, Any]) -> dict[str, Any]:
    assert envelope["ok"] is True, envelope.get("error")
    value: dict[str, Any] = envelope["output"]["value"]
    return value


def _capture_admit_and_search(target: Target) -> str:
    """Capture (a nested `payload`), admit, and search until the record is found; returns
    its record id."""
    text = f"Courier {uuid.uuid4().hex[:8]} lost the parcel; refund approved."
    captured = _value(
        _call(target, "engram_memory_capture", demo_capture_arguments(text, _key("cap")))
    )
    assert captured["status"] == "committed_pending"
    admission = {"candidate_id": captured["candidate_id"], "idempotency_key": _key("adm")}
    outcome = _value(_call(target, "engram_memory_request_admission", admission))["outcome"]
    assert outcome["status"] == "accepted"
    found = _value(_call(target, "engram_memory_search", {"query": text, "purpose_ref": PURPOSE}))[
        "records"
    ]
    assert [record["record"]["record_id"] for record in found] == [outcome["record_id"]]
    record_id: str = outcome["record_id"]
    return record_id


def _key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


def test_the_inspector_is_pinned_to_one_version_and_one_dependency_tree() -> None:
    tools = Path(__file__).resolve().parents[2] / "scripts/inspector"
    package = json.loads((tools / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((tools / "package-lock.json").read_text(encoding="utf-8"))
    name = "@modelcontextprotocol/inspector"
    assert package["dependencies"] == {name: pinned_version()}
    assert lock["packages"][f"node_modules/{name}"]["version"] == pinned_version()
    # Every package pinned by its integrity hash, none by a registry URL.
    pinned = [entry for path, entry in lock["packages"].items() if path]
    assert all("integrity" in entry and "resolved" not in entry for entry in pinned)
    # The clients page's Inspector command names the version the tests drive.
    page = (tools.parents[1] / "docs/operators/clients.md").read_text(encoding="utf-8")
    assert f"{name}@{pinned_version()} --cli" in page


def test_inspector_lists_captures_and_searches_through_a_stdio_gateway_it_launched(
    stdio_target: Target,
) -> None:
    # Each CLI run launches a gateway (and its upstream server) of its own: three runs.
    assert _listed_tools(stdio_target) == SIX_TOOLS
    text = f"Courier {uuid.uuid4().hex[:8]} lost the parcel; refund approved."
    arguments = demo_capture_arguments(text, _key("cap"))
    captured = _value(_call(stdio_target, "engram_memory_capture", arguments))
    assert captured["status"] == "committed_pending"
    search = {"query": text, "purpose_ref": PURPOSE}
    # A pending candidate is never searchable: the search succeeds and finds nothing.
    assert _value(_call(stdio_target, "engram_memory_search", search))["records"] == []


def test_inspector_with_a_bearer_token_works_over_http_but_cannot_forget_without_a_human(
    tmp_path: Path, team: Team, issuer: TokenIssuer
) -> None:
    target = _http_target(tmp_path, team.url, f"Authorization: Bearer {issuer.mint('alice')}")
    assert _listed_tools(target) == SIX_TOOLS
    record_id = _capture_admit_and_search(target)
    # The CLI cannot show a human a confirmation (it declares no elicitation): the gateway
    # refuses, never assumes a yes, and sends nothing upstream.
    forget = {
        "record_id": record_id,
        "idempotency_key": _key("fgt"),
        "reason_ref": "reason:request",
    }
    envelope = _call(target, "engram_memory_forget", forget)
    assert envelope["ok"] is False
    assert envelope["error"]["code"] == "gate_failed"
    still = _call(target, "engram_memory_get", {"record_id": record_id, "purpose_ref": PURPOSE})
    assert _value(still)["record"]["record_id"] == record_id
    refused = ("confirmation", "elicitation_unsupported", "engram_memory_forget")
    assert audit_events(team.config).count(refused) == 1


def test_inspector_without_a_token_is_told_auth_is_required_over_http(
    tmp_path: Path, team: Team
) -> None:
    run = _http_target(tmp_path, team.url).run("--method", "tools/list")
    assert run.exit_code == EXIT_AUTH_REQUIRED
    assert run.error is not None
    assert run.error["code"] == "auth_required"


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"aud": "http://127.0.0.1:1/elsewhere"}, "wrong_audience"),
        ({"tenant": "globex"}, "scope_not_served"),
        ({"exp": 1_000_000_000}, "expired"),
    ],
)
def test_inspector_with_a_token_the_gateway_refuses_is_told_auth_is_required_over_http(
    tmp_path: Path, team: Team, issuer: TokenIssuer, claims: dict[str, Any], reason: str
) -> None:
    token = issuer.mint("alice", **claims)
    run = _http_target(tmp_path, team.url, f"Authorization: Bearer {token}").run(
        "--method", "tools/list"
    )
    assert run.exit_code == EXIT_AUTH_REQUIRED
    assert run.error is not None
    assert run.error["code"] == "auth_required"
    assert ("token_refused", reason, None) in audit_events(team.config)
