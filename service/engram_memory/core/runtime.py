"""What every tool needs for one call: the services, the bound caller, and the call's clock.

A `CallContext` is built once per call after the invocation context verified; tools never read
the wall clock themselves, so one capture instant serves every check of a call (SPEC §4.3).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engram_memory.contract.digests import one_way_ref, principal_ref
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.types import format_instant
from engram_memory.core.decision_keeping import DEFAULT_RETENTION_DAYS
from engram_memory.core.failpoints import UnsafeFailpoints
from engram_memory.core.flood_bound import DEFAULT_BURST, DEFAULT_INTERVAL_MS
from engram_memory.core.rate_limits import RateLimiter
from engram_memory.core.search_index import SearchIndex
from engram_memory.core.startup_audit import StartupAudit
from engram_memory.crypto.checkpoint_key import CheckpointSigningKey
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore
from engram_memory.host.context import InvocationContext
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider, Subject
from engram_memory.store.database import Database


@dataclass(frozen=True)
class ServiceSettings:
    host_memory_enabled: bool = True
    # SPEC §4.1: default response ceiling; policy may lower it per binding.
    response_ceiling_bytes: int = 2_097_152
    # Refusal storms (core/flood_bound.py): this many entries per key and window, then one
    # counted summary per window of this length.
    refusal_burst: int = DEFAULT_BURST
    refusal_interval_ms: int = DEFAULT_INTERVAL_MS
    # How long each decision's input is kept for policy replay (core/decision_keeping.py);
    # 0: none is kept.
    decision_input_retention_days: int = DEFAULT_RETENTION_DAYS
    # Test-only (never armed unless ENGRAM_UNSAFE_FAILPOINTS is set when the service starts).
    failpoints: UnsafeFailpoints = field(default_factory=UnsafeFailpoints.from_environment)


@dataclass
class Services:
    """Long-lived collaborators shared by all calls."""

    database: Database
    keys: KeyStore
    decider: PolicyDecider
    root_key: RootKey
    host_keys: HostKeyring
    settings: ServiceSettings = field(default_factory=ServiceSettings)
    clock_ms: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    rate_limiter: RateLimiter = field(default_factory=RateLimiter)
    # The in-process lexical index following the store (None: search reads the store).
    search_index: SearchIndex | None = None
    # Signs audit checkpoints and export manifests (core/checkpoints.py); None: unsigned.
    checkpoint_key: CheckpointSigningKey | None = None
    # What the start-up check of the audit trail did (core/startup_audit.py); None: skipped.
    startup_audit: StartupAudit | None = None


@dataclass(frozen=True)
class CallContext:
    """What is fixed for one call: the services, the bound caller, the tool and the clock.

    The call's audit facts are not kept here: they are gathered in a `CallAudit`
    (core/call_audit.py) passed explicitly to the steps that add to them.

    What is derived from the binding (hashed refs, the instant, the policy subject) is
    computed once per call (`cached_property`: a call asks for each several times).
    """

    services: Services
    invocation: InvocationContext
    tool: str
    now_ms: int
    # Set by the transport when the client cancels the call (MCP notifications/cancelled).
    cancellation: threading.Event | None = None
    # Set when an invocation token bound this call: its audit id stays claimed in the store
    # until then (core/replay_guard.py). None for server-made contexts (maintenance, import).
    audit_id_kept_until_ms: int | None = None

    @property
    def scope_ref(self) -> str:
        return self.invocation.scope_ref

    @functools.cached_property
    def principal_ref(self) -> str:
        return principal_ref(self.invocation.tenant, self.invocation.principal)

    @functools.cached_property
    def agent_ref(self) -> str:
        return one_way_ref("agent", self.invocation.agent_id)

    @functools.cached_property
    def session_ref(self) -> str:
        return one_way_ref("session", self.invocation.session)

    @functools.cached_property
    def now_instant(self) -> str:
        return format_instant(self.now_ms)

    @functools.cached_property
    def subject(self) -> Subject:
        inv = self.invocation
        return Subject(
            tenant=inv.tenant,
            workspace=inv.workspace,
            principal=inv.principal,
            agent_id=inv.agent_id,
            purpose_ref=inv.purpose_ref,
            host_id=inv.host_id,
            groups=inv.groups,
        )

    def check_still_wanted(self) -> None:
        """Deadline and cancellation apply until commit (SPEC §1.8).

        Raises:
            ToolError: CANCELLED once the client cancelled the call; DEADLINE_EXCEEDED once
                the host's deadline has passed.
        """
        if self.cancellation is not None and self.cancellation.is_set():
            raise ToolError(ErrorCode.CANCELLED, "cancelled by the client")
        deadline = self.invocation.deadline_ms
        if deadline is not None and self.services.clock_ms() > deadline:
            raise ToolError(ErrorCode.DEADLINE_EXCEEDED, "host deadline passed")

    def check_before_commit(self) -> None:
        """`check_still_wanted`, as the last step before a tool's write transaction.

        Raises:
            ToolError: CANCELLED or DEADLINE_EXCEEDED.
        """
        self.services.settings.failpoints.pause_before_commit(self.tool, self.cancellation)
        self.check_still_wanted()
