"""Every gateway audit line is bounded (issue 23, finding 3): in-process, through the real
handlers, 10,000 lines of each kind a client can provoke write at most `burst + 1` lines per
key and window, and the written lines plus the summaries' counts add up to exactly 10,000.

The kinds: a purpose the caller may not use (`caller_refused`), duplicate argument keys and
lone surrogates (`call_refused`), a confirmation refused (`confirmation`), a bad bearer token
(`token_refused`), a malformed message (`request_refused`). The real-process check is in
tests/adversarial/test_gateway_audit_flood.py.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from engram_memory.contract.refusals import RefusalReason
from engram_memory.gateway.audit_bound import AuditBound
from engram_memory.gateway.audit_log import GatewayAudit, verify_audit
from engram_memory.gateway.door import DoorRefusals
from engram_memory.gateway.jwks import JwksCache
from engram_memory.gateway.server import _Gateway
from engram_memory.gateway.upstream import Upstream
from engram_memory.transport.json_gate import ARGUMENT_DEFECT, ArgumentDefect, GateRefusal
from tests.gateway.callers import DESKTOP_CALLER, desktop_config
from tests.gateway.conftest import Clock
from tests.gateway.test_oauth import rules_for
from tests.gateway.token_issuer import TokenIssuer

N = 10_000
BURST = 10
RECORD = "mem_" + "a" * 52
FORGET_ARGS = {"record_id": RECORD, "idempotency_key": "k" * 16, "reason_ref": "reason:x"}
# A handshake-era client that never declared elicitation: every confirmation is refused
# (elicitation_unsupported) without a human, as fast as the client can call.
_NO_ELICITATION = SimpleNamespace(
    protocol_version="2025-11-25", session=SimpleNamespace(client_capabilities=None)
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def audit(tmp_path: Path, clock: Clock) -> Iterator[GatewayAudit]:
    bound = AuditBound(burst=BURST, interval_s=60.0, clock=clock)
    log = GatewayAudit.open(tmp_path / "gateway-audit.jsonl", "host:gw", bound)
    yield log
    log.close()


@pytest.fixture
def gateway(tmp_path: Path, audit: GatewayAudit) -> _Gateway:
    config = desktop_config(tmp_path)
    return _Gateway(Upstream(config.upstream), lambda _ctx: DESKTOP_CALLER, config, audit)


def _lines(audit: GatewayAudit, event: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in audit.path.read_text().splitlines()]
    return [e for e in lines if e["event"] == event]


def _counted(lines: list[dict[str, Any]]) -> int:
    return sum(int(e.get("detail", {}).get("summary_count", "1")) for e in lines)


def _summaries(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in lines if "summary_count" in e.get("detail", {})]


async def _purpose_refused(gateway: _Gateway) -> None:
    params = types.CallToolRequestParams(
        name="engram_memory_search", arguments={"query": "q", "purpose_ref": "purpose:other"}
    )
    with pytest.raises(MCPError):
        await gateway.call_tool(_NO_ELICITATION, params)  # type: ignore[arg-type]


async def _duplicate_arguments(gateway: _Gateway) -> None:
    params = types.CallToolRequestParams(name="engram_memory_forget", arguments=FORGET_ARGS)
    token = ARGUMENT_DEFECT.set(ArgumentDefect.DUPLICATE_KEYS)
    try:
        result = await gateway.call_tool(_NO_ELICITATION, params)  # type: ignore[arg-type]
    finally:
        ARGUMENT_DEFECT.reset(token)
    assert isinstance(result, types.CallToolResult)
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == "INVALID_SCHEMA"


async def _confirmation_refused(gateway: _Gateway) -> None:
    params = types.CallToolRequestParams(name="engram_memory_forget", arguments=FORGET_ARGS)
    result = await gateway.call_tool(_NO_ELICITATION, params)  # type: ignore[arg-type]
    assert isinstance(result, types.CallToolResult)
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == "gate_failed"


@pytest.mark.parametrize(
    ("provoke", "event", "reason"),
    [
        (_purpose_refused, "caller_refused", "purpose_not_allowed"),
        (_duplicate_arguments, "call_refused", "duplicate_argument_keys"),
        (_confirmation_refused, "confirmation", "elicitation_unsupported"),
    ],
)
async def test_ten_thousand_call_refusals_of_each_kind_write_the_burst_and_one_summary(
    gateway: _Gateway,
    audit: GatewayAudit,
    provoke: Callable[[_Gateway], Awaitable[None]],
    event: str,
    reason: str,
) -> None:
    for _ in range(N):
        await provoke(gateway)
    audit.flush_all()
    lines = _lines(audit, event)
    assert len(lines) == BURST + 1
    assert {e["reason"] for e in lines} == {reason}
    assert _counted(lines) == N
    (summary,) = _summaries(lines)
    # A summary names who and which tool, never a single call's target.
    assert summary["tenant"] == "acme"
    assert "target" not in summary
    assert "op_digest" not in summary
    assert verify_audit(audit.path) == BURST + 1


async def test_each_window_writes_at_most_the_burst_and_one_summary_with_exact_counts(
    gateway: _Gateway, audit: GatewayAudit, clock: Clock
) -> None:
    windows = 4
    for index in range(N):
        if index and index % (N // windows) == 0:
            clock.now += 61
        await _purpose_refused(gateway)
    audit.flush_all()
    lines = _lines(audit, "caller_refused")
    assert len(lines) == windows * (BURST + 1)
    assert _counted(lines) == N
    assert [int(e["detail"]["summary_count"]) for e in _summaries(lines)] == [
        N // windows - BURST
    ] * windows


async def test_a_counted_refusal_answers_with_the_audit_id_of_the_summary_that_counts_it(
    gateway: _Gateway, audit: GatewayAudit
) -> None:
    params = types.CallToolRequestParams(name="engram_memory_forget", arguments=FORGET_ARGS)
    ids = []
    for _ in range(BURST + 3):
        result = await gateway.call_tool(_NO_ELICITATION, params)  # type: ignore[arg-type]
        assert result.structured_content is not None  # type: ignore[union-attr]
        ids.append(result.structured_content["auditId"])  # type: ignore[union-attr]
    audit.flush_all()
    lines = _lines(audit, "confirmation")
    assert ids[:BURST] == [e["audit_id"] for e in lines[:BURST]]
    assert set(ids[BURST:]) == {lines[BURST]["audit_id"]}
    assert lines[BURST]["detail"]["summary_count"] == "3"


async def test_ten_thousand_bad_tokens_write_the_burst_and_one_summary(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    from engram_memory.gateway.oauth import JwtVerifier

    check = JwtVerifier(rules_for(issuer), JwksCache(issuer.jwks_url, timeout_s=5), audit)
    for _ in range(N):
        assert await check.verify_token("not-a-jwt") is None
    audit.flush_all()
    lines = _lines(audit, "token_refused")
    assert len(lines) == BURST + 1
    assert _counted(lines) == N


async def test_ten_thousand_malformed_messages_write_the_burst_and_one_summary(
    audit: GatewayAudit,
) -> None:
    door = DoorRefusals(audit, "stdio")
    refusal = GateRefusal(-32700, None, RefusalReason.PARSE_ERROR, "other")
    for _ in range(N):
        await door.refused(refusal)
    audit.flush_all()
    lines = _lines(audit, "request_refused")
    assert len(lines) == BURST + 1
    assert _counted(lines) == N
    # What every counted line shared stays in the summary.
    assert _summaries(lines)[0]["detail"]["transport"] == "stdio"


def test_a_summary_owed_is_written_when_the_log_closes_and_the_chain_verifies(
    tmp_path: Path, clock: Clock
) -> None:
    path = tmp_path / "closing.jsonl"
    with GatewayAudit.open(path, "host:gw", AuditBound(burst=1, clock=clock)) as log:
        for _ in range(5):
            log.record("upstream_restarted", reason="exited")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e.get("detail", {}).get("summary_count") for e in lines] == [None, "4"]
    assert verify_audit(path) == 2


def test_the_timers_flush_writes_a_summary_once_its_window_ended_and_not_before(
    tmp_path: Path, clock: Clock
) -> None:
    path = tmp_path / "timer.jsonl"
    with GatewayAudit.open(path, "host:gw", AuditBound(burst=1, clock=clock)) as log:
        for _ in range(3):
            log.record("upstream_unavailable", reason="connect_failed")
        log.flush_due()  # what the timer runs: the window is still open
        assert len(path.read_text().splitlines()) == 1
        clock.now += 61
        log.flush_due()
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [e.get("detail", {}).get("summary_count") for e in lines] == [None, "2"]
