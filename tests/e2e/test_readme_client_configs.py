"""Every client configuration in docs/operators/clients.md ("Connect MCP clients"), run as
written.

Each block follows a `<!-- client-config: NAME -->` marker. Only the documented placeholders
are replaced (the checkout's `engram-memory`, the gateway config's path, the team gateway's
URL); then a stdio entry's `command` + `args` + `env` is launched exactly as the client would
(the SDK's StdioServerParameters) and an HTTP entry's `url` is reached with a bearer token
from a local issuer (what the client sends after its OAuth sign-in). Each session lists the
tools, captures (a nested payload), admits, searches, and forgets with the human's accept
given through MCP elicitation. Each block is also checked against the keys its client
documents, so a typo'd or invented key fails here rather than in a user's client.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from engram_memory.client.demo import demo_capture_arguments
from tests.e2e.gateways import (
    BIN_PLACEHOLDER,
    CONFIG_PLACEHOLDER,
    ENGRAM_MEMORY,
    PURPOSE,
    URL_PLACEHOLDER,
    audit_events,
    http_gateway,
    reserve_port,
    write_http_config,
)
from tests.gateway.token_issuer import TokenIssuer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CLIENTS_PAGE = ROOT / "docs/operators/clients.md"
DESKTOP_EXAMPLE = ROOT / "examples/gateway/desktop.yaml"
MARKER = re.compile(r"<!-- client-config: ([a-z0-9-]+) -->\n```(\w+)\n(.*?)\n```", re.S)
SIX_TOOLS = {
    "engram_memory_capture",
    "engram_memory_request_admission",
    "engram_memory_search",
    "engram_memory_get",
    "engram_memory_withdraw",
    "engram_memory_forget",
}
STDIO_CLIENTS = ("claude-desktop", "vscode-stdio", "cursor-stdio")
HTTP_CLIENTS = ("vscode-http", "cursor-http", "claude-code")

# The keys each client documents for a server entry, from the clients' own pages: Claude
# Desktop, modelcontextprotocol.io/docs/develop/connect-local-servers (`mcpServers`: command,
# args, env); VS Code, code.visualstudio.com/docs/copilot/reference/mcp-configuration
# (`servers`, `inputs`; stdio: type, command, args, env, envFile; http: type, url, headers);
# Cursor, cursor.com/docs/context/mcp (`mcpServers`: command, args, env, or url, headers);
# Claude Code, code.claude.com/docs/en/mcp (`claude mcp add --transport http NAME URL`).
DOCUMENTED: dict[str, tuple[str, frozenset[str], frozenset[str], frozenset[str]]] = {
    # client: (map key, allowed top-level keys, allowed entry keys, required entry keys)
    "claude-desktop": (
        "mcpServers",
        frozenset({"mcpServers"}),
        frozenset({"command", "args", "env"}),
        frozenset({"command"}),
    ),
    "vscode-stdio": (
        "servers",
        frozenset({"servers", "inputs"}),
        frozenset({"type", "command", "args", "env", "envFile"}),
        frozenset({"type", "command"}),
    ),
    "cursor-stdio": (
        "mcpServers",
        frozenset({"mcpServers"}),
        frozenset({"command", "args", "env"}),
        frozenset({"command"}),
    ),
    "vscode-http": (
        "servers",
        frozenset({"servers", "inputs"}),
        frozenset({"type", "url", "headers"}),
        frozenset({"type", "url"}),
    ),
    "cursor-http": (
        "mcpServers",
        frozenset({"mcpServers"}),
        frozenset({"url", "headers"}),
        frozenset({"url"}),
    ),
}


def readme_blocks() -> dict[str, tuple[str, str]]:
    """NAME -> (fence language, text) of every marked block of the clients page."""
    blocks: dict[str, tuple[str, str]] = {}
    for name, language, text in MARKER.findall(CLIENTS_PAGE.read_text(encoding="utf-8")):
        assert name not in blocks, f"two blocks of the clients page are marked {name}"
        blocks[name] = (language, text)
    return blocks


def _substituted(text: str, replacements: Mapping[str, str]) -> str:
    for placeholder, value in replacements.items():
        text = text.replace(placeholder, value)
    assert "/absolute/path" not in text, text
    assert "example.com" not in text, text
    return text


def documented_entry(name: str, document: Any) -> dict[str, Any]:
    """The one server entry of a client's configuration document.

    Raises:
        AssertionError: the document uses a key its client does not document, or lacks one
            the client requires.
    """
    map_key, top_keys, entry_keys, required = DOCUMENTED[name]
    assert isinstance(document, dict)
    assert set(document) <= top_keys, f"{name}: undocumented top-level keys"
    (entry,) = document[map_key].values()
    assert required <= set(entry) <= entry_keys, f"{name}: undocumented or missing entry keys"
    if "type" in entry:
        assert entry["type"] == ("stdio" if "command" in entry else "http")
    entry_dict: dict[str, Any] = entry
    return entry_dict


def _entry(name: str, replacements: Mapping[str, str]) -> dict[str, Any]:
    """The one server entry of a JSON block of the clients page, checked against its
    client's keys."""
    language, text = readme_blocks()[name]
    assert language == "json"
    return documented_entry(name, json.loads(_substituted(text, replacements)))


def _claude_code_url(replacements: Mapping[str, str]) -> str:
    """The URL of the clients page's `claude mcp add` line, after checking it has the documented
    form: options before the server name, then the URL (no `--` and no command)."""
    language, text = readme_blocks()["claude-code"]
    assert language == "bash"
    argv = shlex.split(_substituted(text, replacements))
    assert argv[:3] == ["claude", "mcp", "add"]
    options, positional = argv[3:-2], argv[-2:]
    assert options == ["--transport", "http"]
    name, url = positional
    assert re.fullmatch(r"[A-Za-z0-9_-]+", name)
    assert url.startswith("http")
    return url


class Human:
    """The elicitation callback of a client whose human accepts every confirmation shown;
    it keeps what it was asked so a test can see the question reached the client."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.asked.append(params.message)
        properties: dict[str, Any] = params.requested_schema.get("properties", {})
        content: dict[str, str | int | float | bool | list[str] | None] = {
            name: True for name, spec in properties.items() if spec.get("type") == "boolean"
        }
        return types.ElicitResult(action="accept", content=content)


async def _session(client: Client, human: Human) -> None:
    """List, capture, admit, search, forget (accepted by the human), and search again."""
    listed = await client.list_tools()
    assert {tool.name for tool in listed.tools} == SIX_TOOLS
    text = f"Courier {uuid.uuid4().hex[:8]} lost the parcel; refund approved."
    captured = await _ok(client, "engram_memory_capture", demo_capture_arguments(text, _key()))
    admission = {"candidate_id": captured["candidate_id"], "idempotency_key": _key()}
    outcome = (await _ok(client, "engram_memory_request_admission", admission))["outcome"]
    assert outcome["status"] == "accepted"
    search = {"query": text, "purpose_ref": PURPOSE}
    found = (await _ok(client, "engram_memory_search", search))["records"]
    assert [hit["record"]["record_id"] for hit in found] == [outcome["record_id"]]
    assert human.asked == []
    forget = {
        "record_id": outcome["record_id"],
        "idempotency_key": _key(),
        "reason_ref": "reason:request",
    }
    await _ok(client, "engram_memory_forget", forget)
    assert len(human.asked) == 1
    assert (await _ok(client, "engram_memory_search", search))["records"] == []


async def _ok(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    envelope = result.structured_content or {}
    assert envelope.get("ok") is True, envelope.get("error")
    assert result.is_error is False
    value: dict[str, Any] = envelope["output"]["value"]
    return value


def _key() -> str:
    return f"readme-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def team(
    tmp_path_factory: pytest.TempPathFactory, host_secrets: tuple[Path, Path, Path]
) -> Iterator[tuple[str, TokenIssuer]]:
    """One team gateway for the module's HTTP entries: its URL and its identity provider."""
    directory = tmp_path_factory.mktemp("team")
    port = reserve_port()
    issuer = TokenIssuer(audience=f"http://127.0.0.1:{port}/mcp")
    try:
        config = write_http_config(
            directory,
            directory / "data",
            host_secrets,
            port=port,
            issuer=issuer.issuer,
            jwks_url=issuer.jwks_url,
        )
        with http_gateway(config, port) as url:
            yield url, issuer
    finally:
        issuer.close()


@asynccontextmanager
async def _bearer_client(url: str, token: str, human: Human) -> AsyncIterator[Client]:
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, elicitation_callback=human, cache=None) as client:
            yield client


def test_the_readme_marks_one_block_per_documented_client() -> None:
    assert set(readme_blocks()) == {*STDIO_CLIENTS, *HTTP_CLIENTS}


@pytest.mark.parametrize(
    ("name", "document"),
    [
        ("claude-desktop", {"mcpServers": {"m": {"command": "x", "cwd": "/"}}}),
        ("vscode-stdio", {"servers": {"m": {"command": "x"}}}),
        ("vscode-http", {"servers": {"m": {"type": "sse", "url": "https://h/mcp"}}}),
        ("cursor-http", {"mcpServers": {"m": {"url": "https://h/mcp", "auth": {}}}}),
        ("cursor-stdio", {"mcpServers": {"m": {"command": "x"}}, "servers": {}}),
    ],
)
def test_the_key_check_refuses_an_entry_its_client_does_not_document(
    name: str, document: dict[str, Any]
) -> None:
    with pytest.raises(AssertionError):
        documented_entry(name, document)


def test_the_host_examples_mcp_servers_entry_is_the_readmes_desktop_entry() -> None:
    example = ROOT / "examples/host/mcp-servers.json"
    readme_entry = json.loads(readme_blocks()["claude-desktop"][1])
    assert json.loads(example.read_text(encoding="utf-8")) == readme_entry


@pytest.fixture
def desktop_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The clients page's desktop set-up, step by step, for a user whose home is in tmp_path: keys,
    ~/.engram, a copy of examples/gateway/desktop.yaml with the two documented edits (this OS
    user, an absolute `engram-memory`), and `--check`. Returns the copy's path."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # what the client's launch passes on, too
    secrets = home / ".engram-secrets"
    subprocess.run([ENGRAM_MEMORY, "host", "init", "--dir", str(secrets)], check=True)
    (home / ".engram").mkdir()
    config = home / ".engram/gateway.yaml"
    document = yaml.safe_load(DESKTOP_EXAMPLE.read_text(encoding="utf-8"))
    document["stdio"]["os_user"] = pwd.getpwuid(os.geteuid()).pw_name
    document["upstream"]["command"][0] = ENGRAM_MEMORY
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    check = subprocess.run([ENGRAM_MEMORY, "gateway", "--config", str(config), "--check"])
    assert check.returncode == 0
    return config


def test_the_readme_desktop_entries_launch_the_gateway_for_a_whole_governed_session(
    desktop_config: Path,
) -> None:
    config = desktop_config
    replacements = {BIN_PLACEHOLDER: ENGRAM_MEMORY, CONFIG_PLACEHOLDER: str(config)}
    # Each client's entry, checked against its own keys, is launched as that client would.
    # Entries that launch the same process (same command, args and env) share one session:
    # a second launch would prove nothing the first did not.
    launches: dict[str, StdioServerParameters] = {}
    for name in STDIO_CLIENTS:
        entry = _entry(name, replacements)
        server = StdioServerParameters(
            command=entry["command"], args=entry.get("args", []), env=entry.get("env")
        )
        launches.setdefault(server.model_dump_json(), server)

    async def scenario(server: StdioServerParameters) -> None:
        human = Human()
        async with Client(server, elicitation_callback=human, cache=None) as client:
            await _session(client, human)

    for server in launches.values():
        anyio.run(scenario, server)
    # The human's yes reached the gateway's audit, once per session's forget.
    accepted = ("confirmation", "accepted", "engram_memory_forget")
    assert audit_events(config).count(accepted) == len(launches)


@pytest.mark.parametrize("name", HTTP_CLIENTS)
def test_a_readme_team_entry_reaches_the_gateway_with_a_signed_in_token(
    name: str, team: tuple[str, TokenIssuer]
) -> None:
    gateway_url, issuer = team
    replacements = {URL_PLACEHOLDER: gateway_url}
    url = (
        _claude_code_url(replacements)
        if name == "claude-code"
        else _entry(name, replacements)["url"]
    )
    assert url == gateway_url
    human = Human()

    async def scenario() -> None:
        async with _bearer_client(url, issuer.mint("alice"), human) as client:
            await _session(client, human)

    anyio.run(scenario)


def test_a_client_given_only_the_readme_url_discovers_where_its_user_signs_in(
    team: tuple[str, TokenIssuer],
) -> None:
    # What VS Code, Cursor and Claude Code do first with the URL (clients page: "How the sign-in
    # happens"): a request without a token, the challenge, the protected-resource metadata.
    url, issuer = team
    challenge = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert challenge.status_code == httpx.codes.UNAUTHORIZED
    scheme, _, parameters = challenge.headers["www-authenticate"].partition(" ")
    assert scheme == "Bearer"
    found = re.search(r'resource_metadata="([^"]+)"', parameters)
    assert found is not None
    metadata = httpx.get(found.group(1)).json()
    assert metadata["resource"] == url
    assert metadata["authorization_servers"] == [issuer.issuer]
