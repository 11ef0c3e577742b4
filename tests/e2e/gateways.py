"""Gateways for the stock-client tests: their config files (the documented schema, written as
an operator would) and `engram-memory gateway` in HTTP mode as a running process.

The gateway's upstream is always the real `engram-memory serve` over stdio, started by the
gateway itself, on a real DuckDB file in the test's directory.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.servers import free_port, server_env

PURPOSE = "purpose:support-case"
# The `engram-memory` console script of the environment running the tests: what a docs
# entry's `command` names (`/absolute/path/to/engram-memory/.venv/bin/engram-memory`).
ENGRAM_MEMORY = str(Path(sys.executable).parent / "engram-memory")
START_DEADLINE_S = 60.0
# The placeholders the docs' client entries (and examples/host/mcp-servers.json) document.
BIN_PLACEHOLDER = "/absolute/path/to/engram-memory/.venv/bin/engram-memory"
CONFIG_PLACEHOLDER = "/absolute/path/to/gateway.yaml"
URL_PLACEHOLDER = "https://memory.example.com/mcp"


def _upstream(data_dir: Path, secrets: tuple[Path, Path, Path]) -> dict[str, Any]:
    root_key, _signing_key, public_keys = secrets
    return {
        "command": [
            sys.executable,
            "-m",
            "engram_memory.cli",
            "serve",
            "--transport",
            "stdio",
        ],
        "env": server_env(data_dir, root_key, public_keys),
        "timeout_s": 30,
    }


def write_stdio_config(directory: Path, data_dir: Path, secrets: tuple[Path, Path, Path]) -> Path:
    """A desktop gateway config (`mode: stdio`) binding acme/support for the OS user running
    the tests, as `user:alice`; returns its path."""
    os_user = pwd.getpwuid(os.geteuid()).pw_name
    config = {
        "mode": "stdio",
        "host_id": "host:gateway-desktop",
        "signing_key": str(secrets[1]),
        "audit_log": str(directory / "gateway-audit.jsonl"),
        "upstream": _upstream(data_dir, secrets),
        "stdio": {
            "tenant": "acme",
            "workspace": "support",
            "principal": "user:alice",
            "agent_id": "agent:desktop",
            "purposes": [PURPOSE],
            "os_user": os_user,
            "approver": "human:alice",
        },
    }
    path = directory / "desktop.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def write_http_config(
    directory: Path,
    data_dir: Path,
    secrets: tuple[Path, Path, Path],
    *,
    port: int,
    issuer: str,
    jwks_url: str,
) -> Path:
    """A team gateway config (`mode: http`) on 127.0.0.1:`port` trusting `issuer`; returns
    its path. The resource (and audience) is `http://127.0.0.1:<port>/mcp`."""
    resource = f"http://127.0.0.1:{port}/mcp"
    config = {
        "mode": "http",
        "host_id": "host:gateway-team",
        "signing_key": str(secrets[1]),
        "audit_log": str(directory / "gateway-audit.jsonl"),
        "upstream": _upstream(data_dir, secrets),
        "http": {
            "listen": {"host": "127.0.0.1", "port": port},
            "resource": resource,
            "issuer": issuer,
            "jwks_url": jwks_url,
            "audience": resource,
            "algorithms": ["RS256", "ES256"],
            "claims": {
                "principal": {"claim": "sub", "prefix": "user:"},
                "tenant": {"claim": "tenant"},
                "workspace": {"claim": "workspace"},
                "agent": {"claim": "azp", "prefix": "agent:"},
            },
            "scopes": [{"tenant": "acme", "workspace": "support", "purposes": [PURPOSE]}],
        },
    }
    path = directory / "team.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def audit_events(config: Path) -> list[tuple[str, str, str | None]]:
    """(event, reason, tool) of every entry of the gateway audit log beside `config`."""
    path = config.parent / "gateway-audit.jsonl"
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [(entry["event"], entry["reason"], entry.get("tool")) for entry in entries]


def reserve_port() -> int:
    """A loopback port that was free a moment ago (the gateway binds it itself)."""
    return free_port()


@contextmanager
def http_gateway(config: Path, port: int) -> Iterator[str]:
    """`engram-memory gateway --config CONFIG` (mode http) until the block ends; yields its
    MCP URL once it accepts connections.

    Raises:
        RuntimeError: the gateway exited during start-up (its stderr is in the message) or
            did not accept connections within START_DEADLINE_S.
    """
    # stderr to a file, not a pipe nobody drains: a chatty gateway must not block on it.
    log_path = config.with_suffix(".stderr")
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [ENGRAM_MEMORY, "gateway", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        _wait_until_accepting(port, process, log_path)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _wait_until_accepting(port: int, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            try:
                code = process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
            stderr = log_path.read_text(encoding="utf-8", errors="replace")
            raise RuntimeError(
                f"gateway exited during start-up with code {code}: {stderr}"
            ) from None
    raise RuntimeError("gateway never accepted connections")
