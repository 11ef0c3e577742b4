"""The human confirms informed, never told more than policy lets them see (issue 23,
finding 5), against the real gateway and its real `serve` child, read by the real SDK
client's elicitation callback, in both protocol eras.

- A forget of a record the approver may read: the prompt names the tool, the tenant and
  workspace, the record and what their redaction allowlist shows of it (alice is a steward:
  every field), and nothing the store did not answer under that allowlist.
- A forget of a record policy lets them see nothing of (here: one that does not exist, which
  the store answers exactly as a foreign or ineligible one): the prompt says so and shows
  no content. Declined, nothing reaches the store.
- A withdraw: candidates are readable by no one, and the prompt says nothing is shown.
- A record whose text tries to draw on the prompt (line breaks, control characters) is shown
  on one line, quoted, cut to its bound.
"""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
import pytest
from mcp.client.session import ClientRequestContext

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.gateway.preview import CANDIDATE, NOTHING_VISIBLE, TEXT_CHARS
from tests.e2e.gateway_support import (
    code,
    forget_arguments,
    gateway_client,
    key,
    remembered,
    value,
    write_setup,
)

FORGET = "engram_memory_forget"
WITHDRAW = "engram_memory_withdraw"
SECRET_TEXT = "Customer 4417 asked for a refund of parcel 7731 to a new address"
UNKNOWN_RECORD = "mem_" + "q" * 52
MODES = pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["handshake_era", "2026_era"])


class Approver:
    """The SDK client's elicitation callback: reads the prompt, then answers."""

    def __init__(self, accept: bool) -> None:
        self.accept = accept
        self.prompts: list[str] = []

    async def __call__(
        self, _ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.prompts.append(params.message)
        if self.accept:
            return types.ElicitResult(action="accept", content={"confirm": True})
        return types.ElicitResult(action="decline")


@MODES
async def test_the_prompt_names_tool_scope_record_and_what_the_approver_may_see(
    tmp_path: Path, mode: str
) -> None:
    setup = write_setup(tmp_path, init_host_dir(tmp_path / "secrets"))
    approver = Approver(accept=True)
    async with gateway_client(setup, mode=mode, elicit=approver) as client:
        record_id = await remembered(client, SECRET_TEXT)
        value(await client.call_tool(FORGET, forget_arguments(record_id)))
    (prompt,) = approver.prompts
    assert FORGET in prompt
    assert "tenant acme" in prompt
    assert "workspace support" in prompt
    assert record_id in prompt
    assert f'"{SECRET_TEXT}' in prompt  # the steward's allowlist ("") shows the text
    assert "Recorded " in prompt


@MODES
async def test_a_record_policy_lets_the_approver_see_nothing_of_is_said_so_and_nothing_sent(
    tmp_path: Path, mode: str
) -> None:
    setup = write_setup(tmp_path, init_host_dir(tmp_path / "secrets"))
    approver = Approver(accept=False)
    async with gateway_client(setup, mode=mode, elicit=approver) as client:
        await remembered(client, SECRET_TEXT)
        refused = await client.call_tool(FORGET, forget_arguments(UNKNOWN_RECORD))
    assert code(refused) == "gate_failed"
    (prompt,) = approver.prompts
    assert NOTHING_VISIBLE in prompt
    assert UNKNOWN_RECORD in prompt
    assert "reads:" not in prompt
    assert SECRET_TEXT not in prompt
    assert FORGET not in [tool for tool, _outcome, _approver in setup.upstream_audit()]


async def test_a_candidate_is_shown_as_unreadable(tmp_path: Path) -> None:
    setup = write_setup(tmp_path, init_host_dir(tmp_path / "secrets"))
    approver = Approver(accept=False)
    async with gateway_client(setup, elicit=approver) as client:
        capture = demo_capture_arguments(SECRET_TEXT, key("cap"))
        candidate_id = value(await client.call_tool("engram_memory_capture", capture))[
            "candidate_id"
        ]
        arguments = {
            "candidate_id": candidate_id,
            "idempotency_key": key("wd"),
            "reason_ref": "reason:request",
        }
        assert code(await client.call_tool(WITHDRAW, arguments)) == "gate_failed"
    (prompt,) = approver.prompts
    assert CANDIDATE in prompt
    assert SECRET_TEXT not in prompt


async def test_a_record_text_cannot_draw_on_the_prompt(tmp_path: Path) -> None:
    setup = write_setup(tmp_path, init_host_dir(tmp_path / "secrets"))
    approver = Approver(accept=False)
    hostile = "Nothing is deleted.\n\nAllow it? Yes.\x1b[2J\u2028" + "x" * 2_000
    async with gateway_client(setup, elicit=approver) as client:
        record_id = await remembered(client, hostile)
        assert code(await client.call_tool(FORGET, forget_arguments(record_id))) == "gate_failed"
    (prompt,) = approver.prompts
    assert "\n" not in prompt
    assert "\x1b" not in prompt
    assert "\u2028" not in prompt
    quoted = prompt.split('reads: "', 1)[1].split('"', 1)[0]
    assert len(quoted) <= TEXT_CHARS
