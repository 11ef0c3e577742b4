"""A -32603 refusal keeps its constant message (SPEC §1.7), and the server's log says what
to do next, once per cause (issue 24, finding 7): a call with no signed context points at the
gateway, one whose signature does not verify at ENGRAM_HOST_KEYS."""

from __future__ import annotations

import pytest

from engram_memory.contract.errors import ProtocolCode
from engram_memory.contract.exceptions import ProtocolRefusal
from engram_memory.contract.refusals import RefusalReason
from engram_memory.server import mcp_wiring


@pytest.mark.parametrize(
    ("reason", "named"),
    [
        (RefusalReason.TOKEN_MISSING, "gateway`,"),
        (RefusalReason.TOKEN_INVALID, "ENGRAM_HOST_KEYS"),
    ],
)
def test_the_log_names_the_next_step_once_per_cause(
    reason: RefusalReason,
    named: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mcp_wiring, "_explained", set())
    refusal = ProtocolRefusal(ProtocolCode.CONTEXT_UNAVAILABLE, reason.value)
    with caplog.at_level("WARNING", logger="engram_memory.mcp"):
        for _ in range(3):  # a client retrying in a loop
            mcp_wiring._explain(refusal)
    (line,) = [record.getMessage() for record in caplog.records]
    assert named in line.split()


def test_a_replayed_token_needs_no_operator_hint(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_wiring, "_explained", set())
    replayed = ProtocolRefusal(ProtocolCode.CONTEXT_UNAVAILABLE, RefusalReason.TOKEN_REPLAYED.value)
    with caplog.at_level("WARNING", logger="engram_memory.mcp"):
        mcp_wiring._explain(replayed)
    assert caplog.records == []
