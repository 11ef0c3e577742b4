"""Desktop mode: one local user, speaking MCP on the gateway's stdin/stdout.

The binding comes from the operator's configuration (`stdio:`); the gateway refuses to start
when the effective OS user is not the one the configuration names, unless the operator says
`allow_other_os_user: true` (a service account running on someone's behalf): a configuration
file copied to another account must not let that account act as its author.
"""

from __future__ import annotations

import contextlib

import anyio

from engram_memory.contract.exceptions import GatewayAuditUnavailable, UpstreamUnavailable
from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.caller import Caller, new_stdio_session
from engram_memory.gateway.config import GatewayConfig, StdioBinding
from engram_memory.gateway.door import DoorRefusals
from engram_memory.gateway.fast import FastCalls
from engram_memory.gateway.os_user import check_os_user as check_os_user
from engram_memory.gateway.pipes import gateway_stdio
from engram_memory.gateway.server import build_gateway_server
from engram_memory.gateway.upstream import Upstream


def stdio_caller(binding: StdioBinding) -> Caller:
    """The one caller of this gateway process (a fresh session per process)."""
    return Caller(
        tenant=binding.tenant,
        workspace=binding.workspace,
        principal=binding.principal,
        agent_id=binding.agent_id,
        session=new_stdio_session(),
        approver=binding.effective_approver,
        purposes=binding.purposes,
        groups=tuple(sorted(set(binding.groups))),
        approver_groups=binding.effective_approver_groups,
    )


def upstream_for(config: GatewayConfig, audit: GatewayAudit) -> Upstream:
    """The configured upstream; a reconnection (a child that died) is audited."""

    def reconnected(reason: str) -> None:
        # Unwritable: the next call that needs the audit fails closed.
        with contextlib.suppress(GatewayAuditUnavailable):
            audit.record("upstream_restarted", reason=reason)

    return Upstream(config.upstream, on_reconnect=reconnected)


async def _warm_up(upstream: Upstream) -> None:
    # The child starts while the client initializes; a failure shows on the first call.
    with contextlib.suppress(UpstreamUnavailable):
        await upstream.connect()


async def serve_stdio(config: GatewayConfig, audit: GatewayAudit) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin.

    Raises:
        ConfigurationError: the signing key cannot be read.
    """
    assert config.stdio is not None
    caller = stdio_caller(config.stdio)
    async with upstream_for(config, audit) as upstream, anyio.create_task_group() as group:
        server = build_gateway_server(upstream, lambda _ctx: caller, config, audit)
        group.start_soon(_warm_up, upstream)
        fast = FastCalls(upstream, caller, config, audit)
        door = DoorRefusals(audit, "stdio")
        try:
            async with gateway_stdio(door.refused, fast.take) as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            audit.flush_all()
        group.cancel_scope.cancel()
