"""The desktop caller the gateway unit tests act for (examples/gateway/desktop.yaml's binding),
and a stdio gateway configuration for that caller whose upstream nothing listens on."""

from __future__ import annotations

from pathlib import Path

from engram_memory.gateway.caller import Caller
from engram_memory.gateway.config import GatewayConfig, load_gateway_config
from engram_memory.host.keys import HostSigningKey

DESKTOP_CALLER = Caller(
    tenant="acme",
    workspace="support",
    principal="user:alice",
    agent_id="agent:desktop",
    session="session:gw-test",
    approver="human:alice",
    purposes=("purpose:support-case",),
)


def desktop_config(directory: Path) -> GatewayConfig:
    """A stdio gateway for DESKTOP_CALLER's binding, its signing key and audit log in
    `directory`, its upstream a closed port (for tests that never reach the server)."""
    HostSigningKey.generate().write_pem_files(directory / "k.pem", directory / "k.pub")
    (directory / "g.yaml").write_text(
        "mode: stdio\nhost_id: host:gw\nsigning_key: k.pem\naudit_log: a.jsonl\n"
        "upstream: {url: 'http://127.0.0.1:1/mcp'}\n"
        "stdio: {tenant: acme, workspace: support, principal: user:alice,"
        " purposes: [purpose:support-case], os_user: alice}\n",
        encoding="utf-8",
    )
    return load_gateway_config(directory / "g.yaml", env={})
