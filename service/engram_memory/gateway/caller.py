"""Who a gateway call runs for.

The binding of every upstream call (tenant, workspace, principal, agent, session, approver,
allowed purposes, groups, the approver's groups) comes from something the operator
controls: the configuration file in stdio mode, a verified bearer token in HTTP mode.
Nothing the model writes can change it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class Caller:
    """Who a call runs for, decided by the operator's config or the verified token, never
    by the model. `purposes` are the purposes a call may bind (the first is bound for tools
    without a purpose argument); `groups` are `group:<name>` references."""

    tenant: str
    workspace: str
    principal: str
    agent_id: str
    session: str
    approver: str
    purposes: tuple[str, ...]
    groups: tuple[str, ...] = ()
    # The approver's `group:<name>` groups the gateway asserts in the confirmations it mints
    # (four-eyes rules), sorted and unique; None: it knows none and asserts none.
    approver_groups: tuple[str, ...] | None = None


def new_stdio_session() -> str:
    """The session of a stdio gateway process: one per process, never reused."""
    return f"session:gw-{uuid.uuid4().hex}"
