"""Team mode tried locally, as docs/operators/team-mode.md has a newcomer try it: a real
`engram-memory gateway dev-idp`, a real HTTP gateway configured from
examples/gateway/team-dev.yaml (only its ports moved, to free ones), the real `engram-memory
serve` the gateway starts, and the MCP SDK client over streamable HTTP with tokens from
`engram-memory gateway dev-idp mint`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import wait_until_listening
from tests.e2e.gateway_support import PURPOSE, remembered, value
from tests.servers import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("dev_idp_team")]

REPO = Path(__file__).resolve().parents[2]
TEAM_DEV = REPO / "examples/gateway/team-dev.yaml"
BIN = Path(sys.executable).parent
ENGRAM_MEMORY = str(BIN / "engram-memory")
READER_TOOLS = {"engram_memory_search", "engram_memory_get"}
# The protocol-level refusal of a tool the caller cannot discover (SPEC: unknown tool).
UNDISCOVERABLE = -32602
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


@dataclass
class LocalTeam:
    """The three processes and the files a newcomer would look at."""

    home: Path
    env: dict[str, str]
    issuer: str
    resource: str
    idp_log: list[str] = field(default_factory=list)

    def mint(self, *args: str) -> str:
        """`engram-memory gateway dev-idp mint ARGS`: the token it prints."""
        minted = subprocess.run(
            [ENGRAM_MEMORY, "gateway", "dev-idp", "mint", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert minted.returncode == 0, minted.stderr
        return minted.stdout.strip()

    def gateway_audit(self) -> list[dict[str, Any]]:
        path = self.home / ".engram-team-dev" / "gateway-audit.jsonl"
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    def post_initialize(self, token: str | None) -> httpx.Response:
        headers = {"Accept": "application/json, text/event-stream"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.post(self.resource, json=INITIALIZE, headers=headers, timeout=30)


def _team_dev_config(home: Path, issuer: str, port: int) -> Path:
    """examples/gateway/team-dev.yaml with the gateway on `port` and the dev-idp at
    `issuer` (both free ports here, where the example names the defaults)."""
    document = yaml.safe_load(TEAM_DEV.read_text(encoding="utf-8"))
    resource = f"http://127.0.0.1:{port}/mcp"
    document["http"].update(
        listen={"host": "127.0.0.1", "port": port},
        resource=resource,
        audience=resource,
        issuer=issuer,
        jwks_url=issuer + "/jwks.json",
    )
    path = home / "team-dev.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTeam]:
    home = tmp_path_factory.mktemp("home")
    init_host_dir(home / ".engram-team-dev" / "secrets")
    # A newcomer's shell: their HOME, the environment's engram-memory on PATH.
    env = {**os.environ, "HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    idp = subprocess.Popen(
        [ENGRAM_MEMORY, "gateway", "dev-idp", "--port", "0", "--audience", resource],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    gateway: subprocess.Popen[bytes] | None = None
    try:
        assert idp.stderr is not None
        started = idp.stderr.readline()  # written once it serves
        assert "NOT FOR PRODUCTION" in started, started
        state = json.loads((home / ".engram-dev-idp.json").read_text(encoding="utf-8"))
        setup = LocalTeam(home, env, state["issuer"], resource)
        # Drained, so a chatty IdP never blocks on a full pipe; kept, to be checked.
        drain = threading.Thread(target=lambda: setup.idp_log.extend(idp.stderr), daemon=True)
        drain.start()
        config = _team_dev_config(home, setup.issuer, port)
        gateway = subprocess.Popen([ENGRAM_MEMORY, "gateway", "--config", str(config)], env=env)
        wait_until_listening(resource, gateway)
        yield setup
    finally:
        if gateway is not None:
            _stop(gateway)
        _stop(idp)


@asynccontextmanager
async def member(team: LocalTeam, token: str) -> AsyncIterator[Client]:
    """The SDK client with `Authorization: Bearer <token>` on every request."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(streamable_http_client(team.resource, http_client=http)) as client:
        yield client


def test_without_a_token_the_gateway_answers_401_leading_to_the_dev_idp(team: LocalTeam) -> None:
    refused = team.post_initialize(None)
    assert refused.status_code == 401
    challenge = refused.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    metadata_url = team.resource.removesuffix("/mcp") + "/.well-known/oauth-protected-resource/mcp"
    assert f'resource_metadata="{metadata_url}"' in challenge
    protected = httpx.get(metadata_url, timeout=10).json()
    assert protected["authorization_servers"] == [team.issuer]
    server_metadata = httpx.get(
        team.issuer + "/.well-known/oauth-authorization-server", timeout=10
    ).json()
    assert server_metadata["issuer"] == team.issuer
    assert server_metadata["jwks_uri"] == team.issuer + "/jwks.json"


async def test_a_minted_token_is_served_and_its_calls_succeed(team: LocalTeam) -> None:
    text = f"Courier {uuid.uuid4().hex[:8]} needs a signature on delivery."
    async with member(team, team.mint("--sub", "alice")) as client:
        assert len((await client.list_tools()).tools) == 6
        record_id = await remembered(client, text)
        found = value(
            await client.call_tool("engram_memory_search", {"query": text, "purpose_ref": PURPOSE})
        )
    assert record_id in [hit["record"]["record_id"] for hit in found["records"]]


async def test_a_group_grant_serves_a_member_and_refuses_a_non_member(team: LocalTeam) -> None:
    # user:zoe has no grant of her own; policies/acme.yaml grants group:support-advisors
    # the reader role for purpose:support-case.
    search = {"query": "courier signature", "purpose_ref": PURPOSE}
    async with member(team, team.mint("--sub", "zoe", "--group", "support-advisors")) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == READER_TOOLS
        value(await client.call_tool("engram_memory_search", search))
    async with member(team, team.mint("--sub", "zoe", "--group", "marketing")) as client:
        assert (await client.list_tools()).tools == []
        with pytest.raises(MCPError) as refused:
            await client.call_tool("engram_memory_search", search)
    assert refused.value.error.code == UNDISCOVERABLE


def _forged_with_a_key_of_its_own(token: str) -> str:
    """The token's claims, widened, signed by an attacker's key under the dev-idp's kid."""
    claims = jwt.decode(token, options={"verify_signature": False})
    claims.update(sub="mallory", groups=["support-advisors"])
    kid = jwt.get_unverified_header(token)["kid"]
    attacker = ec.generate_private_key(ec.SECP256R1())
    return jwt.encode(claims, attacker, algorithm="ES256", headers={"kid": kid})


def _tampered(token: str) -> str:
    """The dev-idp's own signature over a payload edited after signing."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = "mallory"
    edited = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{edited}.{signature}"


async def test_expired_and_forged_tokens_are_refused_401_and_audited(team: LocalTeam) -> None:
    genuine = team.mint("--sub", "alice")
    cases = {
        "expired": (team.mint("--sub", "alice", "--expired"), "expired"),
        "forged": (_forged_with_a_key_of_its_own(genuine), "bad_signature"),
        "tampered": (_tampered(genuine), "bad_signature"),
    }
    for name, (token, reason) in cases.items():
        refused = team.post_initialize(token)
        assert refused.status_code == 401, name
        assert "resource_metadata=" in refused.headers["www-authenticate"], name
        last = team.gateway_audit()[-1]
        assert (last["event"], last["reason"]) == ("token_refused", reason), name
    with pytest.raises(BaseException):  # noqa: B017, PT011 - the SDK's own error type
        async with member(team, cases["expired"][0]) as client:
            await client.list_tools()
    logged = "".join(team.idp_log) + (team.home / ".engram-team-dev/gateway-audit.jsonl").read_text(
        encoding="utf-8"
    )
    assert genuine not in logged
    assert all(token not in logged for token, _reason in cases.values())


PAGE = REPO / "docs/operators/team-mode.md"
# A marked command block and the output block right after it, if any.
BLOCK = re.compile(
    r"<!-- team-mode: ([a-z-]+) -->\n```bash\n(.*?)\n```(?:\n\n```text\n(.*?)\n```)?", re.S
)
# The blocks a reader leaves running in terminals of their own, and where they listen.
LONG_RUNNING = {
    "dev-idp": "http://127.0.0.1:8790/.well-known/oauth-authorization-server",
    "gateway": "http://127.0.0.1:8787/mcp",
}


def _port_taken(port: int) -> bool:
    with socket.socket() as probe:
        # As the servers bind: a port whose old connections linger in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _in_background(block: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            ["bash", "-c", block], cwd=REPO, env=env, stdout=out, stderr=out, start_new_session=True
        )


def _wait_for_dev_idp(url: str, process: subprocess.Popen[bytes]) -> None:
    for _ in range(400):
        try:
            if httpx.get(url, timeout=0.5).status_code == 200:
                return
        except httpx.TransportError:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.05)
            assert process.poll() is None, "the dev-idp exited during start-up"
    raise AssertionError("dev-idp never answered")


def _interrupt(process: subprocess.Popen[bytes]) -> int:
    """Ctrl-C, as the reader stops it (to its process group: bash and its child)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        raise


def test_the_try_it_locally_walk_through_runs_to_the_letter(tmp_path: Path) -> None:
    """docs/operators/team-mode.md, block by block, at the ports it names, in an empty HOME."""
    if _port_taken(8787) or _port_taken(8790):
        pytest.skip("the page's ports 8787/8790 are in use on this machine")
    blocks = {
        name: (script, expected) for name, script, expected in BLOCK.findall(PAGE.read_text())
    }
    assert list(blocks) == [
        "keys", "dev-idp", "gateway", "unauthenticated", "alice", "groups", "refusals", "clean-up"
    ]  # fmt: skip
    assert (REPO / ".venv/bin/activate").exists()
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}

    def shell(script: str) -> subprocess.CompletedProcess[str]:
        ran = subprocess.run(
            ["bash", "-c", f"set -euo pipefail\n{script}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode == 0, f"{script}\n--- stderr:\n{ran.stderr}"
        return ran

    assert "team-dev.yaml is valid (mode http)" in shell(blocks["keys"][0]).stderr
    running: list[subprocess.Popen[bytes]] = []
    try:
        for name, url in LONG_RUNNING.items():
            process = _in_background(blocks[name][0], env, tmp_path / f"{name}.log")
            running.append(process)
            if name == "dev-idp":
                _wait_for_dev_idp(url, process)
            else:
                wait_until_listening(url, process)
        assert "NOT FOR PRODUCTION" in (tmp_path / "dev-idp.log").read_text()
        # Terminal 1, where `keys` activated the virtualenv: the helper function and the
        # tokens carry from block to block.
        steps = ["unauthenticated", "alice", "groups", "refusals"]
        script = "source .venv/bin/activate\n" + "".join(
            f"echo '@@ {name}'\n{blocks[name][0]}\n" for name in steps
        )
        outputs = shell(script).stdout.replace("\r", "").split("@@ ")[1:]
        for name, output in zip(steps, outputs, strict=True):
            shown = output.removeprefix(name + "\n").splitlines()
            assert shown == blocks[name][1].splitlines(), name
    finally:
        codes = [_interrupt(process) for process in reversed(running)]
    assert codes == [0, 0]
    assert not (home / ".engram-dev-idp.json").exists()
    shell(blocks["clean-up"][0])
    assert not (home / ".engram-team-dev").exists()
