"""The desktop caller the gateway unit tests act for (examples/gateway/desktop.yaml's binding)."""

from __future__ import annotations

from engram_memory.gateway.caller import Caller

DESKTOP_CALLER = Caller(
    tenant="acme",
    workspace="support",
    principal="user:alice",
    agent_id="agent:desktop",
    session="session:gw-test",
    approver="human:alice",
    purposes=("purpose:support-case",),
)
