"""Issue 3, reference host (examples/host/ and engram_memory.client.reference_host): before a
confirmed call the human is shown the tool, the target and the operation digest, and a
confirmation bound to exactly that call is minted only on an explicit yes.

The host against a real server (stdio and HTTP, yes/no, policy-confirmed tools, retries,
example configurations) is proven in tests/host_examples (see tests/RULES.md).
"""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

import anyio
import mcp_types as types
import pytest

from engram_memory.client.reference_host import Binding, ConfirmationPrompt, ReferenceHost
from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.host.confirmation import (
    CONFIRMATION_META_KEY,
    ConfirmationBinding,
    verify_confirmation,
)
from engram_memory.host.keys import HostKeyring
from tests.harness import SIGNER
from tests.host_examples.test_reference_host_example import _example_host_module

FORGET = "engram_memory_forget"
RECORD_ID = "mem_" + "q" * 52
ARGS = {"record_id": RECORD_ID, "idempotency_key": "key-0123456789abcdef", "reason_ref": "r:x"}
OP = operation_digest(FORGET, normalize(ARGS))
BINDING = Binding("acme", "support", "user:alice", "purpose:support-case", session="session:h")


def _ask(answers: str, approver: str | None) -> tuple[str | None, str]:
    """Run examples/host/host.py's terminal approver on `answers`; (result, what it showed)."""
    host = _example_host_module()
    shown = io.StringIO()
    approve = host.terminal_approver(
        SimpleNamespace(approver=approver), io.StringIO(answers), shown
    )
    result = anyio.run(approve, ConfirmationPrompt(FORGET, RECORD_ID, OP, ARGS))
    return result, shown.getvalue()


@pytest.mark.parametrize(
    ("answers", "configured", "expected"),
    [
        ("yes\n", "human:dana", "human:dana"),
        ("  YES \n", "human:dana", "human:dana"),
        ("yes\ndana\n", None, "human:dana"),
        ("no\n", "human:dana", None),
        ("y\n", "human:dana", None),
        ("yes please\n", "human:dana", None),
        ("", "human:dana", None),  # end of input is a no
        ("yes\n\n", None, None),  # a yes without a name is no approval
    ],
)
def test_reference_host_shows_tool_target_and_op_digest_and_approves_only_an_explicit_yes(
    answers: str, configured: str | None, expected: str | None
) -> None:
    result, shown = _ask(answers, configured)
    assert result == expected
    for fact in (FORGET, RECORD_ID, OP):
        assert fact in shown


class _RecordingSession:
    def __init__(self) -> None:
        self.sent: list[types.CallToolRequest] = []

    async def send_request(self, request: types.CallToolRequest, _result: Any) -> Any:
        self.sent.append(request)
        return types.CallToolResult(content=[], structured_content={"ok": True}, is_error=False)


def _host() -> tuple[ReferenceHost, _RecordingSession]:
    session = _RecordingSession()
    return ReferenceHost(SimpleNamespace(session=session), SIGNER, BINDING), session  # type: ignore[arg-type]


def test_reference_host_sends_nothing_without_a_yes() -> None:
    host, session = _host()
    seen: list[ConfirmationPrompt] = []

    async def say_no(prompt: ConfirmationPrompt) -> str | None:
        seen.append(prompt)
        return None

    assert anyio.run(host.call_confirmed, FORGET, ARGS, RECORD_ID, say_no) is None
    assert session.sent == []
    assert [(p.tool, p.target, p.operation_digest) for p in seen] == [(FORGET, RECORD_ID, OP)]


def test_reference_host_mints_on_yes_a_confirmation_bound_to_exactly_that_call() -> None:
    host, session = _host()

    async def say_yes(_prompt: ConfirmationPrompt) -> str | None:
        return "human:dana"

    assert anyio.run(host.call_confirmed, FORGET, ARGS, RECORD_ID, say_yes) is not None
    [request] = session.sent
    assert (request.params.name, request.params.arguments) == (FORGET, ARGS)
    assert request.params.meta is not None
    meta: dict[str, Any] = dict(request.params.meta)
    token = meta[CONFIRMATION_META_KEY]
    binding = ConfirmationBinding(FORGET, RECORD_ID, OP, BINDING.session, BINDING.principal)
    keyring = HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()})
    assert verify_confirmation(token, keyring, binding).approver == "human:dana"
