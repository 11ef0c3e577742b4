"""The gateway as a desktop client meets it: `engram-memory gateway --config FILE` spawned by
the real MCP SDK client over stdio, the real `engram-memory serve` child behind it (embedded
policy, a real DuckDB file in a temporary directory)."""

from __future__ import annotations

import json
import os
import pwd
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import mcp_types as types
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import server_env
from engram_memory.store.connection import DATABASE_FILE

PURPOSE = "purpose:support-case"
GATEWAY = [sys.executable, "-m", "engram_memory.cli", "gateway"]
SERVE_STDIO = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "stdio"]
Elicit = Callable[[ClientRequestContext, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


def os_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


@dataclass(frozen=True)
class GatewaySetup:
    """A configuration file and what it points at."""

    config: Path
    data_dir: Path
    audit_log: Path
    env: dict[str, str]

    def upstream_audit(self) -> list[tuple[str, str, str | None]]:
        """(tool, outcome, approver) of every store audit entry, read offline (the gateway
        and its child have stopped)."""
        connection = duckdb.connect(str(self.data_dir / DATABASE_FILE), read_only=True)
        try:
            rows = connection.execute(
                "SELECT tool, outcome, approver FROM audit_entries ORDER BY sequence"
            ).fetchall()
        finally:
            connection.close()
        return [(str(tool), str(outcome), approver) for tool, outcome, approver in rows]

    def gateway_audit(self) -> list[dict[str, Any]]:
        lines = self.audit_log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]


def write_setup(
    directory: Path,
    secrets: tuple[Path, Path, Path],
    *,
    upstream_url: str | None = None,
    confirmation_timeout_s: float = 30,
    upstream_env: dict[str, str] | None = None,
    confirmation_tools: tuple[str, ...] = (),
    **stdio: Any,
) -> GatewaySetup:
    """A stdio-mode configuration in `directory` (relative paths, as an operator writes it)."""
    directory.mkdir(parents=True, exist_ok=True)
    root_key, signing_key, public_keys = secrets
    data_dir = directory / "data"
    env = server_env(data_dir, root_key, public_keys, **(upstream_env or {}))
    upstream: dict[str, Any] = (
        {"url": upstream_url} if upstream_url else {"command": SERVE_STDIO, "env": env}
    )
    binding = {
        "tenant": "acme",
        "workspace": "support",
        "principal": "user:alice",
        "agent_id": "agent:desktop",
        "purposes": [PURPOSE],
        "os_user": os_user(),
        **stdio,
    }
    document = {
        "mode": "stdio",
        "host_id": "host:gateway-desktop",
        "signing_key": str(signing_key),
        "audit_log": "gateway-audit.jsonl",
        "upstream": {**upstream, "timeout_s": 30},
        "confirmation": {"timeout_s": confirmation_timeout_s, "tools": list(confirmation_tools)},
        "stdio": binding,
    }
    config = directory / "gateway.yaml"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    return GatewaySetup(config, data_dir, directory / "gateway-audit.jsonl", env)


@asynccontextmanager
async def gateway_client(
    setup: GatewaySetup, *, mode: str = "legacy", elicit: Elicit | None = None
) -> AsyncIterator[Client]:
    """The SDK client talking to a real gateway process; `elicit` None declares no
    elicitation capability. Leaving the block stops the gateway and its child."""
    server = StdioServerParameters(
        command=GATEWAY[0], args=[*GATEWAY[1:], "--config", str(setup.config)], env=dict(os.environ)
    )
    async with Client(server, mode=mode, elicitation_callback=elicit, cache=None) as client:
        yield client


def envelope(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return dict(result.structured_content)


def value(result: types.CallToolResult) -> dict[str, Any]:
    body = envelope(result)
    assert body["ok"] is True, body
    assert result.is_error is False
    output: dict[str, Any] = body["output"]["value"]
    return output


def code(result: types.CallToolResult) -> str:
    body = envelope(result)
    assert body["ok"] is False, body
    assert result.is_error is True
    error_code: str = body["error"]["code"]
    return error_code


async def remembered(client: Client, text: str) -> str:
    """Capture and admit `text`; its record id."""
    captured = value(
        await client.call_tool("engram_memory_capture", demo_capture_arguments(text, key("cap")))
    )
    admitted = value(
        await client.call_tool(
            "engram_memory_request_admission",
            {"candidate_id": captured["candidate_id"], "idempotency_key": key("adm")},
        )
    )
    record_id: str = admitted["outcome"]["record_id"]
    return record_id


def forget_arguments(record_id: str) -> dict[str, Any]:
    return {"record_id": record_id, "idempotency_key": key("fgt"), "reason_ref": "reason:request"}


async def get(client: Client, record_id: str) -> types.CallToolResult:
    return await client.call_tool(
        "engram_memory_get", {"record_id": record_id, "purpose_ref": PURPOSE}
    )
