"""What the gateway refuses at the door: the strict JSON gate `engram-memory serve` runs.

Every request is judged on its raw bytes (a stdio line, an HTTP POST body) by the same gate
as the upstream server's (json_gate.py) before anything else reads it: not UTF-8, a lone
surrogate, NaN, nesting deeper than 64 -> Parse error -32700; a batch, a bad id, duplicate
keys outside a tools/call's arguments, a message the SDK's model refuses, an oversized line
-> Invalid Request -32600; constant messages, no data. Without it the SDK would keep the
last of duplicate keys, replace invalid UTF-8, drop an unparsable or oversized line
unanswered, or echo its parser's text.

Each refusal is recorded in the gateway audit log as `request_refused` (reason: the gate's
`RefusalReason` value), bounded as every gateway audit line is (audit_bound.py): anyone who
can write to the gateway can send garbage, and every entry is fsynced.

A tools/call whose arguments hold a duplicate key (raw or after NFC) or a lone surrogate is
admitted with the gate's `ARGUMENT_DEFECT` set in the context of the task that hands it on;
the call path refuses it after the purpose rule (SPEC §1.8: purpose before schema) with an
`INVALID_SCHEMA` envelope (SPEC §3), audited `call_refused` with the defect as its reason
(`duplicate_argument_keys`, `unpaired_surrogate_in_arguments`), nothing sent upstream
(forwarded, the SDK's parse would have collapsed it into a valid call).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import anyio
import mcp_types as types
from pydantic import ValidationError

from engram_memory.contract.exceptions import GatewayAuditUnavailable
from engram_memory.contract.refusals import RefusalReason
from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.transport.json_gate import INVALID_REQUEST, GateRefusal

REQUEST_REFUSED = "request_refused"
CALL_REFUSED = "call_refused"
# An oversized line or body: its id was never read, so it is answered with id null.
OVERSIZED = GateRefusal(INVALID_REQUEST, None, RefusalReason.REQUEST_TOO_LARGE, "other")


class SdkModel:
    """The gate's `accepts` check that keeps what it validated: the SDK's message model of
    the gate's own parse, so a line is parsed once (the stdio path hands `model` on)."""

    def __init__(self) -> None:
        self.model: types.JSONRPCMessage | None = None

    def __call__(self, message: object) -> bool:
        try:
            self.model = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        except ValidationError:
            self.model = None
            return False
        return True


def sdk_accepts(message: object) -> bool:
    """Whether the SDK's message model takes `message` (as mcp_server.py checks it)."""
    return SdkModel()(message)


class DoorRefusals:
    """Records the gate's refusals in the gateway audit log (which bounds them per reason)."""

    def __init__(self, audit: GatewayAudit, transport: str) -> None:
        self._audit, self._transport = audit, transport  # "stdio" | "http"

    async def refused(self, refusal: GateRefusal) -> None:
        """Record one refusal (already answered on the wire).

        An unwritable log is not an error here: the request is refused either way, and the
        calls that need the log fail closed on their own.
        """
        detail = {"method": refusal.method, "transport": self._transport}
        # fsynced: in a worker thread, so a flood does not stall the event loop.
        await anyio.to_thread.run_sync(self._write, refusal.reason.value, detail)

    def _write(self, reason: str, detail: Mapping[str, str]) -> None:
        with contextlib.suppress(GatewayAuditUnavailable):
            self._audit.record(REQUEST_REFUSED, reason=reason, detail=detail)
