"""The stdio fast path (gateway/fast.py): which calls it answers itself, and that those
calls are bound, minted and answered exactly as the SDK path would."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import UpstreamUnavailable
from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.caller import Caller
from engram_memory.gateway.config import ALWAYS_CONFIRMED, GatewayConfig
from engram_memory.gateway.fast import FastCalls
from engram_memory.gateway.upstream import Upstream
from engram_memory.host.context import INVOCATION_META_KEY, verify_invocation
from engram_memory.host.keys import HostKeyring, HostSigningKey

VERSION = "2025-11-25"
PURPOSE = "purpose:support-case"
CALLER = Caller(
    "acme", "support", "user:alice", "agent:desktop", "session:gw-1", "human:alice", (PURPOSE,)
)


class FakeUpstream:
    def __init__(self, answer: dict[str, Any] | Exception, version: str | None = VERSION) -> None:
        self.answer, self.version = answer, version
        self.sent: list[tuple[str, Mapping[str, Any] | None, Mapping[str, Any]]] = []

    def child_version(self) -> str | None:
        return self.version

    async def call_tool_json(
        self, name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.sent.append((name, arguments, meta))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class FakeAudit:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def record(self, event: str, *, reason: str, **_fields: object) -> str:
        self.events.append((event, reason))
        return "audit:gw-1"


def _fast(tmp_path: Path, upstream: FakeUpstream, audit: FakeAudit | None = None) -> FastCalls:
    key = HostSigningKey.generate()
    key.write_pem_files(tmp_path / "host.pem", tmp_path / "host.pub.pem")
    config = SimpleNamespace(
        signing_key=tmp_path / "host.pem",
        host_id="host:gw-test",
        confirmed_tools=frozenset(ALWAYS_CONFIRMED),
    )
    return FastCalls(
        cast(Upstream, upstream),
        CALLER,
        cast(GatewayConfig, config),
        cast(GatewayAudit, audit or FakeAudit()),
    )


def _call(tool: str, arguments: object, **params: object) -> types.JSONRPCRequest:
    return types.JSONRPCRequest(
        jsonrpc="2.0",
        id=7,
        method="tools/call",
        params={"name": tool, "arguments": arguments, **params},
    )


SEARCH = {"query": "refund", "purpose_ref": PURPOSE}
RESULT = {"content": [{"type": "text", "text": "{}"}], "structuredContent": {"ok": True}}


def test_a_plain_call_is_answered_with_the_upstreams_result_unchanged_under_a_fresh_token(
    tmp_path: Path,
) -> None:
    upstream = FakeUpstream(RESULT)
    fast = _fast(tmp_path, upstream)
    client_meta = {"engram-memory/invocation": "forged", "progressToken": 3}
    answers = []
    for _ in range(2):
        pending = fast.take(_call("engram_memory_search", SEARCH, _meta=client_meta), VERSION)
        assert pending is not None
        answers.append(anyio.run(lambda p=pending: p))
    assert all(isinstance(a, types.JSONRPCResponse) and a.result == RESULT for a in answers)
    assert all(a.id == 7 for a in answers)
    keyring = HostKeyring({fast.minter._signer.kid: fast.minter._signer.private_key.public_key()})
    tokens = [meta[INVOCATION_META_KEY] for _name, _args, meta in upstream.sent]
    assert [set(meta) for _n, _a, meta in upstream.sent] == [{INVOCATION_META_KEY}] * 2
    contexts = [verify_invocation(token, keyring) for token in tokens]
    assert {c.purpose_ref for c in contexts} == {PURPOSE}
    assert {c.principal for c in contexts} == {"user:alice"}
    assert contexts[0].audit_id != contexts[1].audit_id
    assert upstream.sent[0][1] == SEARCH


@pytest.mark.parametrize(
    ("request_", "version"),
    [
        (_call("engram_memory_forget", {"record_id": "r"}), VERSION),
        (_call("engram_memory_search", {"query": "q", "purpose_ref": "purpose:other"}), VERSION),
        (_call("engram_memory_search", SEARCH), None),
        (_call("engram_memory_search", SEARCH), "2025-06-18"),
        (_call("engram_memory_search", SEARCH, task={"ttl": 1}), VERSION),
        (_call("engram_memory_search", ["not", "an", "object"]), VERSION),
        (
            _call(
                "engram_memory_search",
                SEARCH,
                _meta={"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
            ),
            VERSION,
        ),
        (types.JSONRPCRequest(jsonrpc="2.0", id=1, method="tools/list", params={}), VERSION),
    ],
    ids=[
        "confirmed_tool",
        "purpose_not_the_callers",
        "before_the_handshake",
        "other_version_than_the_child",
        "unknown_params_member",
        "arguments_not_an_object",
        "2026_era",
        "not_tools_call",
    ],
)
def test_everything_but_a_plain_bound_call_is_left_to_the_sdk_path_and_nothing_is_sent(
    tmp_path: Path, request_: types.JSONRPCRequest, version: str | None
) -> None:
    upstream = FakeUpstream(RESULT)
    assert _fast(tmp_path, upstream).take(request_, version) is None
    assert upstream.sent == []


def test_a_mutation_sent_but_unanswered_is_an_audited_retriable_outcome_unknown(
    tmp_path: Path,
) -> None:
    audit = FakeAudit()
    upstream = FakeUpstream(UpstreamUnavailable(True, "connection_lost"))
    capture = {"idempotency_key": "k", "payload": {"purpose_ref": PURPOSE}}
    pending = _fast(tmp_path, upstream, audit).take(
        _call("engram_memory_capture", capture), VERSION
    )
    assert pending is not None
    answer = anyio.run(lambda: pending)
    assert isinstance(answer, types.JSONRPCResponse)
    envelope = answer.result["structuredContent"]
    assert envelope["error"]["code"] == ErrorCode.MUTATION_OUTCOME_UNKNOWN.name
    assert envelope["auditId"] == "audit:gw-1"
    assert answer.result["isError"] is True
    assert envelope["error"]["retriable"] is True
    assert "resultType" not in answer.result
    assert audit.events == [("upstream_unavailable", "connection_lost")]


def test_an_upstream_json_rpc_error_passes_on_with_its_code(tmp_path: Path) -> None:
    upstream = FakeUpstream(MCPError(-32602, "Invalid params"))
    pending = _fast(tmp_path, upstream).take(_call("engram_memory_search", SEARCH), VERSION)
    assert pending is not None
    answer = anyio.run(lambda: pending)
    assert isinstance(answer, types.JSONRPCError)
    assert answer.error.code == -32602
    assert answer.id == 7
