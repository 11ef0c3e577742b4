"""Refusals into the audit trail, bounded: the host-level stream and counted summaries.

A refusal before binding (contract/refusals.py) has no tenant: it is written to the host
stream, rows of the one audit chain with scope_ref 'host' and a server-made audit id
(`host:<uuid>`, never the client's), recording transport, peer, reason and the digest of
the token if one came. Nothing the client chose is stored verbatim: a method or tool outside
the known names is recorded as `other`.

Refusals are bounded per key (core/flood_bound.py): the first `burst` of a window are
written one by one, the rest counted into one summary entry (`occurrences`, `first_at`,
`last_at`) written when the window ends: by the next refusal recorded after that, by a
timer thread that runs only while a summary is owed, and at shutdown (`close`). Bound
refusals counted this way are the cheap, repeatable ones (`BOUNDED_OUTCOMES`); every allowed
call, and every other refusal, keeps its own entry.

Nothing here raises to the caller: a refusal stands whether or not its trace was written,
and a failed write is logged (type only).
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, replace

from engram_memory.contract.digests import sha256_hex
from engram_memory.contract.refusals import PreBindingRefusal
from engram_memory.contract.schemas import TOOL_SPECS
from engram_memory.contract.types import format_instant
from engram_memory.core.audit_writer import AuditGroupWriter
from engram_memory.core.call_audit import AuditFacts
from engram_memory.core.flood_bound import Counted, FloodCounter, FloodKey, FloodLimits
from engram_memory.core.runtime import CallContext, Services
from engram_memory.store.audit import AuditRecord

log = logging.getLogger("engram_memory.calls")

HOST_SCOPE = "host"
HOST_OUTCOME = "refused"
SUMMARY_DETAIL = "counted refusals"
# Bound refusals a storm can repeat at no cost to the caller: schema and digest errors, rate
# limits, a tool the binding may not see, a purpose or confirmation reference that differs,
# and a listing refused during a policy outage (-32000, retriable: hosts retry it).
BOUNDED_OUTCOMES = frozenset(
    {"INVALID_SCHEMA", "INVALID_DIGEST", "RATE_LIMITED", "rpc:-32602", "rpc:-32603", "rpc:-32000"}
)
_TRANSPORTS = frozenset({"stdio", "http", "maintenance", "in-process"})
_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "notifications/initialized",
        "notifications/cancelled",
        "maintenance",
    }
)
_MAX_PEER_CHARS = 64
# How long the summary timer waits at most between looks at the clock (the clock may be
# injected, so the wait is not computed from it alone).
_TIMER_POLL_S = 1.0


def token_digest(token: object) -> str:
    """The sha256 of a presented token's text ('' when none or not text): an auditor can
    match a token they hold; the token itself is never stored."""
    if not isinstance(token, str) or not token:
        return ""
    return sha256_hex(token.encode("utf-8", errors="surrogatepass"))


def _known(value: str, known: frozenset[str]) -> str:
    return value if value in known else "other"


def _peer(value: str) -> str:
    # A peer is an address or 'stdio'; anything longer than an address is not one.
    text = value if value.isascii() and value.isprintable() else "other"
    return text[:_MAX_PEER_CHARS]


@dataclass(frozen=True)
class _HostTemplate:
    transport: str
    peer: str
    reason: str
    tool: str


@dataclass(frozen=True)
class _BoundTemplate:
    scope_ref: str
    principal_ref: str
    tool: str
    outcome: str
    transport: str
    peer: str


class RefusalStream:
    """Writes refusals through the group writer, bounded by a `FloodCounter`."""

    def __init__(
        self,
        services: Services,
        writer: AuditGroupWriter,
        limits: FloodLimits,
        *,
        timer: bool = True,
    ) -> None:
        self._services = services
        self._writer = writer
        self._counter = FloodCounter(limits)
        self._timer = timer
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        # Set each time summaries are written (for whoever must know one was: tests, logs).
        self.summaries_written = threading.Event()

    # -- recording ----------------------------------------------------------------------

    def record_pre_binding(self, refusal: PreBindingRefusal) -> None:
        """Audit one refusal before binding in the host stream (or count it); never raises."""
        try:
            self._record_pre_binding(refusal)
        except Exception as exc:  # noqa: BLE001 - the refusal stands; its trace is best effort
            log.error("host audit stream: unexpected %s", type(exc).__name__)

    def _record_pre_binding(self, refusal: PreBindingRefusal) -> None:
        now_ms = self._services.clock_ms()
        self.flush_due(now_ms)
        tool = refusal.tool if refusal.tool in TOOL_SPECS else _known(refusal.method, _METHODS)
        template = _HostTemplate(
            transport=_known(refusal.transport, _TRANSPORTS),
            peer=_peer(refusal.peer),
            reason=refusal.reason.value,
            tool=tool,
        )
        key: FloodKey = (HOST_SCOPE, template.peer, template.reason, template.tool)
        if not self._counter.admit(key, now_ms, template):
            self._ensure_timer()
            return
        record = self._host_record(template, now_ms, token_digest(refusal.token))
        if not self._writer.write_records([record]):
            log.error("host audit stream: entry not written reason=%s", template.reason)

    def audit_individually(
        self, ctx: CallContext, facts: AuditFacts, transport: str, peer: str
    ) -> bool:
        """Whether a bound call's entry is written now (True), or its refusal was counted into
        a summary (False): only `BOUNDED_OUTCOMES` without a confirmation to spend are."""
        try:
            now_ms = self._services.clock_ms()
            self.flush_due(now_ms)
            if facts.outcome not in BOUNDED_OUTCOMES or facts.confirmation is not None:
                return True
            template = _BoundTemplate(
                scope_ref=ctx.scope_ref,
                principal_ref=ctx.principal_ref,
                tool=ctx.tool,
                outcome=facts.outcome,
                transport=_known(transport, _TRANSPORTS),
                peer=_peer(peer),
            )
            key: FloodKey = (ctx.scope_ref, ctx.principal_ref, facts.outcome, ctx.tool)
            claim = None
            if ctx.audit_id_kept_until_ms is not None:
                claim = (ctx.invocation.audit_id, ctx.audit_id_kept_until_ms)
            if self._counter.admit(key, now_ms, template, claim):
                return True
            self._ensure_timer()
            return False
        except Exception as exc:  # noqa: BLE001 - when in doubt, the call keeps its entry
            log.error("refusal bound: unexpected %s", type(exc).__name__)
            return True

    # -- summaries ----------------------------------------------------------------------

    def flush_due(self, now_ms: int | None = None) -> None:
        """Write the summaries of the windows that have ended; never raises."""
        try:
            now = self._services.clock_ms() if now_ms is None else now_ms
            next_end = self._counter.next_end_ms()
            if next_end is not None and next_end <= now:
                self._write_summaries(self._counter.due(now))
        except Exception as exc:  # noqa: BLE001 - retried at the next flush or shutdown
            log.error("refusal summaries: unexpected %s", type(exc).__name__)

    def close(self) -> None:
        """Stop the timer and write every summary still owed (at shutdown); never raises."""
        self._closed.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5 * _TIMER_POLL_S)
        try:
            self._write_summaries(self._counter.drain())
        except Exception as exc:  # noqa: BLE001 - nothing more can be done at shutdown
            log.error("refusal summaries at shutdown: unexpected %s", type(exc).__name__)

    def _write_summaries(self, owed: list[Counted]) -> None:
        if not owed:
            return
        records = [self._summary_record(counted) for counted in owed]
        claims = [claim for counted in owed for claim in counted.audit_ids]
        if not self._writer.write_records(records, claims):
            total = sum(counted.occurrences for counted in owed)
            log.error("refusal summaries not written entries=%d refusals=%d", len(owed), total)
            return
        self.summaries_written.set()

    def _summary_record(self, counted: Counted) -> AuditRecord:
        identity = self._services.decider.expected
        template = counted.template
        first_at, last_at = format_instant(counted.first_ms), format_instant(counted.last_ms)
        if isinstance(template, _BoundTemplate):
            return AuditRecord(
                recorded_at=format_instant(self._services.clock_ms()),
                audit_id=f"summary:{uuid.uuid4().hex}",
                scope_ref=template.scope_ref,
                principal_ref=template.principal_ref,
                agent_ref="",
                session_ref="",
                tool=template.tool,
                outcome=template.outcome,
                bundle_digest=identity.digest,
                bundle_revision=identity.revision,
                detail=SUMMARY_DETAIL,
                transport=template.transport,
                peer=template.peer,
                occurrences=counted.occurrences,
                first_at=first_at,
                last_at=last_at,
            )
        assert isinstance(template, _HostTemplate)
        # A summarised key may have seen several peers only when it is the coarse key.
        peer = template.peer if counted.key[1] == template.peer else counted.key[1]
        return replace(
            self._host_record(template, self._services.clock_ms(), ""),
            peer=peer,
            detail=SUMMARY_DETAIL,
            occurrences=counted.occurrences,
            first_at=first_at,
            last_at=last_at,
        )

    def _host_record(self, template: _HostTemplate, now_ms: int, digest: str) -> AuditRecord:
        identity = self._services.decider.expected
        return AuditRecord(
            recorded_at=format_instant(now_ms),
            audit_id=f"host:{uuid.uuid4().hex}",
            scope_ref=HOST_SCOPE,
            principal_ref="",
            agent_ref="",
            session_ref="",
            tool=template.tool,
            outcome=HOST_OUTCOME,
            bundle_digest=identity.digest,
            bundle_revision=identity.revision,
            transport=template.transport,
            peer=template.peer,
            reason=template.reason,
            token_digest=digest,
        )

    # -- the timer ----------------------------------------------------------------------

    def _ensure_timer(self) -> None:
        if not self._timer:
            return
        with self._lock:
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(
                    target=self._run_timer, name="engram-refusal-summaries", daemon=True
                )
                self._thread.start()

    def _run_timer(self) -> None:
        while True:
            with self._lock:
                # Decided under the lock `_ensure_timer` takes after counting: a summary
                # counted after this look starts a new timer.
                next_end = self._counter.next_end_ms()
                if next_end is None or self._closed.is_set():
                    self._thread = None
                    return
            wait_s = max(0.0, min(_TIMER_POLL_S, (next_end - self._services.clock_ms()) / 1000))
            if self._closed.wait(wait_s):
                with self._lock:
                    self._thread = None
                return
            self.flush_due()
