"""Human confirmation through MCP elicitation: a yes becomes a signed confirmation.

Before a destructive call (withdraw, forget, and the tools `confirmation.tools` adds) the
gateway asks the human through the client: a form-mode elicitation whose message names the
tool, the tenant and workspace, the target, what the approver may see of it under policy
(preview.py: the store's redacted view, or that policy allows nothing), what will be
destroyed and the operation digest, with one boolean field.
Only `action == "accept"` with the boolean true releases the call; decline, cancel, a
timeout, a client error or a client that never declared the elicitation capability refuse
it, and nothing is sent upstream. Every outcome is audited (`confirmation`, with its reason).

Two protocol eras reach the same decision:
- handshake era (2025-*): the gateway sends `elicitation/create` on the request's own channel
  and waits at most `confirmation.timeout_s`;
- 2026-07-28: server-initiated requests are gone, so the call answers `input_required` with
  the elicitation embedded and a sealed `request_state`; the client asks the human and
  retries the same call with the answer. The state is sealed with an HMAC key that lives
  only in this process, binds tool, target, operation digest, session and principal, is
  single use, and expires `confirmation.timeout_s` after it was issued.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from engram_memory.contract.types import ToolName
from engram_memory.gateway.caller import Caller
from engram_memory.transport.json_gate import INVALID_REQUEST

CONFIRM_FIELD = "confirm"
INPUT_KEY = "engram-memory/confirmation"

_CONSEQUENCE: dict[str, str] = {
    ToolName.FORGET: (
        "The record is tombstoned: its key is destroyed and its content cannot be recovered."
    ),
    ToolName.WITHDRAW: (
        "The candidate is withdrawn: its key is destroyed and its content cannot be recovered."
    ),
    ToolName.CAPTURE: "A new memory candidate is stored (sealed, pending admission).",
    ToolName.REQUEST_ADMISSION: (
        "The candidate is submitted to the admission policy and may become a readable record."
    ),
}


@dataclass(frozen=True)
class PendingCall:
    """What a human is asked to approve: exactly this call."""

    tool: str
    target: str
    op_digest: str
    caller: Caller
    # What the approver may see of the target (preview.py); filled in before asking.
    shown: str = ""


@dataclass(frozen=True)
class Answer:
    """The human's answer: `accepted` releases the call; `reason` is what the audit says."""

    accepted: bool
    reason: str


def elicitation_message(call: PendingCall) -> str:
    """The text the client shows the human."""
    caller = call.caller
    shown = f"What you may see of it: {call.shown} " if call.shown else ""
    return (
        f"The agent asks to run {call.tool} in tenant {caller.tenant}, workspace "
        f"{caller.workspace}, on {call.target}. {shown}"
        f"{_CONSEQUENCE.get(call.tool, '')} "
        f"Operation digest: {call.op_digest}. Allow it?"
    )


def requested_schema(call: PendingCall) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            CONFIRM_FIELD: {
                "type": "boolean",
                "title": f"Allow {call.tool}",
                "description": f"Target {call.target}",
            }
        },
        "required": [CONFIRM_FIELD],
    }


def client_supports_elicitation(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the client declared form-mode elicitation (an empty `elicitation: {}` means
    form mode, per the MCP specification)."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    return elicitation.form is not None or elicitation.url is None


def answer_of(result: types.ElicitResult) -> Answer:
    """Accept only an explicit accept whose form holds exactly the boolean true: a string
    "true", a 1, or a form padded with fields the gateway never asked for (an approver, a
    note) is not the answer to the question that was shown, so it is no yes."""
    if result.action == "accept":
        content = result.content or {}
        if content.keys() == {CONFIRM_FIELD} and content[CONFIRM_FIELD] is True:
            return Answer(True, "accepted")
        return Answer(False, "declined")
    if result.action == "decline":
        return Answer(False, "declined")
    return Answer(False, "cancelled")


async def elicit_over_channel(
    ctx: ServerRequestContext[Any], call: PendingCall, timeout_s: float
) -> Answer:
    """Handshake era: ask on the request's own channel, bounded by `timeout_s`."""
    try:
        with anyio.fail_after(timeout_s):
            result = await ctx.session.elicit_form(
                elicitation_message(call), requested_schema(call), related_request_id=ctx.request_id
            )
    except TimeoutError:
        return Answer(False, "timed_out")
    except MCPError as error:
        # -32600: the JSON gate found the answer ambiguous (a duplicate key: json_gate.py)
        # or the client itself said its answer was invalid; either way no yes.
        invalid = error.error.code == INVALID_REQUEST
        return Answer(False, "answer_invalid" if invalid else "elicitation_failed")
    except Exception:  # noqa: BLE001 - a malformed answer is never a yes
        return Answer(False, "elicitation_failed")
    return answer_of(result)


class RequestStates:
    """Sealed, single-use `request_state` values for the 2026-07-28 round trip."""

    def __init__(self, timeout_s: float) -> None:
        self._key = secrets.token_bytes(32)
        self._timeout_s = timeout_s
        self._used: dict[str, float] = {}
        self._lock = threading.Lock()

    def _binding(self, call: PendingCall) -> dict[str, str]:
        return {
            "tool": call.tool,
            "target": call.target,
            "op": call.op_digest,
            "session": call.caller.session,
            "principal": call.caller.principal,
        }

    def _mac(self, body: bytes) -> str:
        return hmac.new(self._key, body, hashlib.sha256).hexdigest()

    def seal(self, call: PendingCall) -> str:
        body = json.dumps(
            {**self._binding(call), "iat": time.time(), "nonce": secrets.token_hex(16)},
            sort_keys=True,
            separators=(",", ":"),
        ).encode("utf-8")
        return base64.urlsafe_b64encode(body).decode("ascii") + "." + self._mac(body)

    def open(self, state: str, call: PendingCall) -> str | None:
        """None when `state` is ours, unexpired, unused and bound to `call`; else the audit
        reason (`timed_out` for an expired one, `state_invalid` otherwise)."""
        encoded, _, mac = state.partition(".")
        try:
            body = base64.urlsafe_b64decode(encoded.encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            return "state_invalid"
        if not hmac.compare_digest(self._mac(body), mac):
            return "state_invalid"
        claims = json.loads(body)
        if any(claims.get(name) != value for name, value in self._binding(call).items()):
            return "state_invalid"
        now = time.time()
        if now - float(claims["iat"]) > self._timeout_s:
            return "timed_out"
        nonce = str(claims["nonce"])
        with self._lock:
            self._used = {n: t for n, t in self._used.items() if now - t <= self._timeout_s}
            if nonce in self._used:
                return "state_invalid"
            self._used[nonce] = now
        return None


def input_required(call: PendingCall, states: RequestStates) -> types.InputRequiredResult:
    """2026-07-28: the elicitation the client must answer before retrying the call."""
    request = types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message=elicitation_message(call), requested_schema=requested_schema(call)
        )
    )
    return types.InputRequiredResult(
        input_requests={INPUT_KEY: request}, request_state=states.seal(call)
    )


def answer_from_retry(
    params: types.CallToolRequestParams, call: PendingCall, states: RequestStates
) -> Answer:
    """2026-07-28: the human's answer carried by the retried call."""
    if params.request_state is None:
        return Answer(False, "state_invalid")
    problem = states.open(params.request_state, call)
    if problem is not None:
        return Answer(False, problem)
    responses: Mapping[str, Any] = params.input_responses or {}
    response = responses.get(INPUT_KEY)
    if not isinstance(response, types.ElicitResult):
        return Answer(False, "cancelled")
    return answer_of(response)
