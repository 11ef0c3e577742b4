"""Hostile clients of the signing gateway (issue 11): raw bytes to the real `engram-memory
gateway` process, over stdio (its stdin/stdout) and HTTP (raw POSTs with a valid bearer).

The gateway runs the same strict JSON gate as `engram-memory serve`: every malformed message
is answered with the JSON-RPC code (-32700 / -32600, id null when it cannot be trusted),
recorded in the gateway audit log as `request_refused` with the gate's reason, a flood of
them bounded; a tools/call with a duplicate argument key (raw or after NFC) is answered
`INVALID_SCHEMA` by the gateway itself, nothing sent upstream (the store's own audit, read
once everything stopped, proves it). Client-sent context, stringly or padded "yes" answers
and a cancel while a confirmation is pending release nothing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.gateway.audit_log import verify_audit
from engram_memory.gateway.pipes import MAX_LINE_BYTES
from engram_memory.host.confirmation import CONFIRMATION_META_KEY
from engram_memory.host.context import INVOCATION_META_KEY
from tests.adversarial.wire import RawStdio
from tests.e2e.gateway_support import GATEWAY, PURPOSE, GatewaySetup, write_setup
from tests.e2e.test_gateway_http import MCP_ACCEPT, TeamGateway, team_gateway

PARSE_ERROR, INVALID_REQUEST = -32700, -32600
DEADLINE_S = 30.0
FORGET = "engram_memory_forget"
CAPTURE = "engram_memory_capture"
SEARCH = "engram_memory_search"
# A record id of the shape the server emits (SPEC §3): the confirmation would be asked.
RECORD_ID = "mem_" + "a" * 52
_PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"'
_INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"elicitation": {"form": {}}},
    "clientInfo": {"name": "attacker", "version": "0"},
}

# (name, raw message, code, the gate's reason in the gateway audit)
MALFORMED: list[tuple[str, bytes, int, str]] = [
    ("not_utf8", _PING + b',"params":{"x":"\xff"}}', PARSE_ERROR, "parse_error"),
    ("lone_surrogate", _PING + b',"params":{"x":"\\ud800"}}', PARSE_ERROR, "parse_error"),
    ("nan", _PING + b',"params":{"x":NaN}}', PARSE_ERROR, "parse_error"),
    (
        "deep",
        _PING + b',"params":{"x":' + b"[" * 10_000 + b"]" * 10_000 + b"}}",
        PARSE_ERROR,
        "parse_error",
    ),
    ("batch", b"[" + _PING + b"}]", INVALID_REQUEST, "invalid_request"),
    ("duplicate_top_level", _PING + b',"id":2}', INVALID_REQUEST, "duplicate_keys"),
]


def _call(request_id: int, tool: str, arguments: str, meta: dict[str, Any] | None = None) -> bytes:
    """A raw tools/call whose arguments object is `arguments` verbatim (JSON text)."""
    meta_part = "" if meta is None else ',"_meta":' + json.dumps(meta)
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":'
        f'{{"name":"{tool}","arguments":{arguments}{meta_part}}}}}'
    ).encode()


def _forget(request_id: int, extra: str = "", meta: dict[str, Any] | None = None) -> bytes:
    arguments = (
        f'{{"record_id":"{RECORD_ID}","idempotency_key":"fgt-{request_id}",'
        f'"reason_ref":"reason:request"{extra}}}'
    )
    return _call(request_id, FORGET, arguments, meta)


def _capture(request_id: int, payload_extra: str, purpose: str = PURPOSE) -> bytes:
    payload = f'{{"purpose_ref":"{purpose}"{payload_extra}}}'
    arguments = f'{{"idempotency_key":"cap-{request_id}","payload":{payload}}}'
    return _call(request_id, CAPTURE, arguments)


class RawGateway(RawStdio):
    """The real gateway process in stdio mode, spoken to in raw lines (wire.RawStdio's)."""

    def __init__(self, setup: GatewaySetup) -> None:
        super().__init__(None, [*GATEWAY, "--config", str(setup.config)])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            assert self.process.wait(timeout=DEADLINE_S) == 0
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


@contextmanager
def raw_gateway(setup: GatewaySetup) -> Iterator[RawGateway]:
    """An initialized session (declaring elicitation) with a real gateway; closed (stdin
    closed, exit 0 awaited) when the block ends."""
    gateway = RawGateway(setup)
    try:
        opened = gateway.exchange(
            json.dumps(
                {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": _INITIALIZE}
            ).encode()
        )
        assert "result" in opened
        gateway.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        yield gateway
    finally:
        gateway.close()


def _searched(gateway: RawGateway) -> None:
    """One legitimate call first: the upstream is up, and the store's audit (read once
    everything stopped) shows what reaching it looks like (`_reached`)."""
    arguments = json.dumps({"query": "anything", "purpose_ref": PURPOSE})
    answer = gateway.exchange(_call(99, SEARCH, arguments))
    assert _envelope(answer)["ok"] is True


def _reached(setup: GatewaySetup) -> list[str]:
    """The tools of the store's audit entries; the search of `_searched` always among them."""
    tools = [row[0] for row in setup.upstream_audit()]
    assert SEARCH in tools
    return tools


def _envelope(answer: dict[str, Any]) -> dict[str, Any]:
    envelope: dict[str, Any] = answer["result"]["structuredContent"]
    return envelope


def _refusals(setup: GatewaySetup, event: str = "request_refused") -> list[dict[str, Any]]:
    return [e for e in setup.gateway_audit() if e["event"] == event]


@pytest.fixture
def setup(tmp_path: Path) -> GatewaySetup:
    return write_setup(tmp_path, init_host_dir(tmp_path / "secrets"), confirmation_timeout_s=30)


def test_malformed_lines_are_answered_with_the_gates_codes_and_audited_with_its_reasons(
    setup: GatewaySetup,
) -> None:
    oversized = b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"' + b"x" * MAX_LINE_BYTES
    with raw_gateway(setup) as gateway:
        for _name, raw, expected, _reason in MALFORMED:
            answer = gateway.exchange(raw)
            assert answer["error"]["code"] == expected
            assert answer["id"] is None
            assert "data" not in answer["error"]
        answer = gateway.exchange(oversized + b'"}}')
        assert (answer["id"], answer["error"]["code"]) == (None, INVALID_REQUEST)
        assert gateway.exchange(_PING + b"}") == {"jsonrpc": "2.0", "id": 1, "result": {}}
    reasons = [(e["reason"], e["detail"]["transport"]) for e in _refusals(setup)]
    expected_reasons = [reason for _n, _r, _c, reason in MALFORMED] + ["request_too_large"]
    assert reasons == [(reason, "stdio") for reason in expected_reasons]
    assert verify_audit(setup.audit_log) == len(setup.gateway_audit())


def test_a_flood_of_bad_lines_writes_a_bounded_number_of_audit_entries(
    setup: GatewaySetup,
) -> None:
    with raw_gateway(setup) as gateway:
        for _ in range(40):
            assert gateway.exchange(b"{not json")["error"]["code"] == PARSE_ERROR
    refusals = _refusals(setup)
    singles = [e for e in refusals if "summary_count" not in e.get("detail", {})]
    summaries = [e for e in refusals if "summary_count" in e.get("detail", {})]
    assert len(singles) == 10
    assert [int(e["detail"]["summary_count"]) for e in summaries] == [30]


def test_duplicate_argument_keys_are_invalid_schema_and_nothing_reaches_the_upstream(
    setup: GatewaySetup,
) -> None:
    with raw_gateway(setup) as gateway:
        _searched(gateway)
        answers = [
            gateway.exchange(_capture(11, ',"text":"a","text":"b"')),
            # "é" precomposed and decomposed: equal after NFC (SPEC §3).
            gateway.exchange(_capture(12, ',"caf\\u00e9":1,"cafe\\u0301":2')),
            # forget always needs a human yes: the duplicate is refused before anyone is
            # asked (the next line the gateway writes is the answer, not an elicitation).
            gateway.exchange(_forget(13, ',"idempotency_key":"other"')),
            gateway.exchange(_forget(14, ',"reason_r\\u0065f":"reason:request"')),
        ]
        # The purpose rule comes first (SPEC §1.8): a foreign purpose is -32603.
        foreign = gateway.exchange(_capture(15, ',"text":"a","text":"b"', "purpose:other"))
    assert [a["id"] for a in answers] == [11, 12, 13, 14]
    envelopes = [_envelope(a) for a in answers]
    assert [e["error"]["code"] for e in envelopes] == ["INVALID_SCHEMA"] * 4
    assert foreign["error"]["code"] == -32603
    refused = _refusals(setup, "call_refused")
    assert [e["reason"] for e in refused] == ["duplicate_argument_keys"] * 4
    assert [e["tool"] for e in refused] == [CAPTURE, CAPTURE, FORGET, FORGET]
    assert [e["audit_id"] for e in refused] == [e["auditId"] for e in envelopes]
    assert not _refusals(setup, "confirmation")
    assert [e["reason"] for e in _refusals(setup, "caller_refused")] == ["purpose_not_allowed"]
    tools = _reached(setup)
    assert CAPTURE not in tools
    assert FORGET not in tools


def test_a_lone_surrogate_in_the_arguments_is_invalid_schema_and_nothing_reaches_the_upstream(
    setup: GatewaySetup,
) -> None:
    """SPEC §3 (case 30): INVALID_SCHEMA, not -32700, inside a tool call's arguments."""
    with raw_gateway(setup) as gateway:
        _searched(gateway)
        answers = [
            gateway.exchange(_capture(21, ',"text":"a\\ud800"')),
            gateway.exchange(_forget(22, ',"\\udfff":1')),
        ]
    envelopes = [_envelope(a) for a in answers]
    assert [e["error"]["code"] for e in envelopes] == ["INVALID_SCHEMA"] * 2
    refused = _refusals(setup, "call_refused")
    assert [e["reason"] for e in refused] == ["unpaired_surrogate_in_arguments"] * 2
    assert [e["audit_id"] for e in refused] == [e["auditId"] for e in envelopes]
    assert not _refusals(setup, "confirmation")
    tools = _reached(setup)
    assert CAPTURE not in tools
    assert FORGET not in tools


def _elicited(gateway: RawGateway, raw_call: bytes) -> dict[str, Any]:
    gateway.send(raw_call)
    request = gateway.receive()
    assert request["method"] == "elicitation/create"
    return request


def test_client_sent_context_and_a_not_quite_yes_release_nothing(setup: GatewaySetup) -> None:
    forged = {
        INVOCATION_META_KEY: "forged.invocation.token",
        CONFIRMATION_META_KEY: "forged.confirmation.token",
    }
    not_yes: list[dict[str, Any]] = [
        {"action": "accept", "content": {"confirm": "true"}},
        {"action": "accept", "content": {"confirm": 1}},
        {"action": "accept", "content": {"confirm": True, "approver": "human:mallory"}},
        {"action": "accept", "content": {"confirm": True, "note": "yes"}},
    ]
    codes: list[object] = []
    with raw_gateway(setup) as gateway:
        _searched(gateway)
        for index, answer in enumerate(not_yes):
            asked = _elicited(gateway, _forget(20 + index, meta=forged))
            reply = {"jsonrpc": "2.0", "id": asked["id"], "result": answer}
            result = gateway.exchange(json.dumps(reply).encode())
            if "result" in result:
                codes.append(_envelope(result)["error"]["code"])
            else:  # a reply the SDK's model refuses: -32600 at the door, the call waits on
                assert result["error"]["code"] == INVALID_REQUEST
                codes.append(_envelope(gateway.receive())["error"]["code"])
    # A padded yes (a field beyond the form's one boolean) is not an explicit yes either.
    assert codes == ["gate_failed"] * 4
    tools = _reached(setup)
    assert FORGET not in tools


# Answers whose last value of a repeated key would read as a yes (the SDK keeps the last):
# the gate judges answers as strictly as requests, so each is no confirmation (issue 23).
_DUPLICATED_YES = {
    "action_twice": '{"action":"decline","content":{"confirm":true},"action":"accept"}',
    "confirm_twice": '{"action":"accept","content":{"confirm":false,"confirm":true}}',
    "escaped_twin": '{"action":"accept","content":{"confirm":false,"c\\u006fnfirm":true}}',
    "nested_in_meta": '{"action":"accept","content":{"confirm":true},"_meta":{"k":1,"k":2}}',
    "after_nfc": (
        '{"action":"accept","content":{"confirm":true},"_meta":{"caf\\u00e9":1,"cafe\\u0301":2}}'
    ),
}


def test_an_elicitation_answer_with_a_duplicate_key_is_no_confirmation(
    setup: GatewaySetup,
) -> None:
    codes: list[object] = []
    with raw_gateway(setup) as gateway:
        _searched(gateway)
        for index, answer in enumerate(_DUPLICATED_YES.values()):
            asked = _elicited(gateway, _forget(50 + index))
            reply = f'{{"jsonrpc":"2.0","id":{json.dumps(asked["id"])},"result":{answer}}}'
            codes.append(_envelope(gateway.exchange(reply.encode()))["error"]["code"])
        # A plain yes still confirms: the gate refused the ambiguity, not the human.
        asked = _elicited(gateway, _forget(59))
        yes = {"action": "accept", "content": {"confirm": True}}
        gateway.exchange(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": yes}).encode())
    assert codes == ["gate_failed"] * len(_DUPLICATED_YES)
    reasons = [e["reason"] for e in _refusals(setup, "confirmation")]
    assert reasons == ["answer_invalid"] * len(_DUPLICATED_YES) + ["accepted"]
    assert _reached(setup).count(FORGET) == 1  # the plain yes only


def test_a_cancel_while_a_confirmation_is_pending_sends_nothing_upstream(
    setup: GatewaySetup,
) -> None:
    with raw_gateway(setup) as gateway:
        _searched(gateway)
        asked = _elicited(gateway, _forget(30))
        gateway.send(
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":30}}'
        )
        # The human says yes after the agent cancelled: too late, nothing is sent.
        yes = {"action": "accept", "content": {"confirm": True}}
        gateway.send(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": yes}).encode())
        # The gateway still serves; whatever it says about the cancelled call, no result.
        gateway.send(_PING + b"}")
        while (message := gateway.receive()).get("id") != 1:
            assert "result" not in message
    tools = _reached(setup)
    assert FORGET not in tools


# -- HTTP ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamGateway]:
    with team_gateway(tmp_path_factory.mktemp("hostile-team")) as gateway:
        yield gateway


def _session(team: TeamGateway, token: str) -> dict[str, str]:
    headers = {"Accept": MCP_ACCEPT, "Authorization": f"Bearer {token}"}
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": _INITIALIZE}
    opened = httpx.post(team.resource, json=initialize, headers=headers, timeout=DEADLINE_S)
    assert opened.status_code == 200
    headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
    headers["Mcp-Protocol-Version"] = "2025-11-25"
    headers["Content-Type"] = "application/json"
    initialized = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    posted = httpx.post(team.resource, content=initialized, headers=headers, timeout=DEADLINE_S)
    assert posted.status_code == 202
    return headers


def _audited(team: TeamGateway, count: int) -> list[dict[str, Any]]:
    """The gateway audit once it holds `count` entries. The gate answers an HTTP refusal
    before it records it (as serve's does), so the entry may land just after the answer:
    waited for, up to the deadline, never assumed."""
    deadline = time.monotonic() + DEADLINE_S
    while len(entries := team.gateway_audit()) < count:
        assert time.monotonic() < deadline, "the refusal was never audited"
        threading.Event().wait(0.01)
    return entries


def _message(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message: dict[str, Any] = json.loads(line[5:])
                return message
        raise AssertionError("no message in the event stream")
    body: dict[str, Any] = response.json()
    return body


def test_malformed_bodies_are_refused_400_with_the_gates_codes_and_audited(
    team: TeamGateway,
) -> None:
    headers = _session(team, team.issuer.mint("alice"))
    before = len(team.gateway_audit())
    for _name, raw, expected, _reason in MALFORMED:
        response = httpx.post(team.resource, content=raw, headers=headers, timeout=DEADLINE_S)
        assert response.status_code == 400
        answer = response.json()
        assert answer["error"]["code"] == expected
        assert "data" not in answer["error"]
    audited = _audited(team, before + len(MALFORMED))
    refused = [e for e in audited[before:] if e["event"] == "request_refused"]
    assert [(e["reason"], e["detail"]["transport"]) for e in refused] == [
        (reason, "http") for _n, _r, _c, reason in MALFORMED
    ]


def test_duplicate_argument_keys_over_http_are_invalid_schema_from_the_gateway(
    team: TeamGateway,
) -> None:
    headers = _session(team, team.issuer.mint("alice"))
    raw = _capture(41, ',"caf\\u00e9":1,"cafe\\u0301":2')
    response = httpx.post(team.resource, content=raw, headers=headers, timeout=DEADLINE_S)
    envelope = _envelope(_message(response))
    assert envelope["error"]["code"] == "INVALID_SCHEMA"
    entry = next(e for e in team.gateway_audit() if e["audit_id"] == envelope["auditId"])
    assert (entry["event"], entry["reason"]) == ("call_refused", "duplicate_argument_keys")


def test_a_lone_surrogate_in_the_arguments_over_http_is_invalid_schema_from_the_gateway(
    team: TeamGateway,
) -> None:
    headers = _session(team, team.issuer.mint("alice"))
    raw = _capture(42, ',"text":"a\\ud800"')
    response = httpx.post(team.resource, content=raw, headers=headers, timeout=DEADLINE_S)
    envelope = _envelope(_message(response))
    assert envelope["error"]["code"] == "INVALID_SCHEMA"
    entry = next(e for e in team.gateway_audit() if e["audit_id"] == envelope["auditId"])
    assert (entry["event"], entry["reason"]) == ("call_refused", "unpaired_surrogate_in_arguments")


def test_a_stranger_meets_401_before_the_gate_and_writes_no_request_refused_entry(
    team: TeamGateway,
) -> None:
    headers = _session(team, team.issuer.mint("alice"))
    before = len(team.gateway_audit())
    stranger = {"Accept": MCP_ACCEPT, "Content-Type": "application/json"}
    garbage = MALFORMED[0][1]
    response = httpx.post(team.resource, content=garbage, headers=stranger, timeout=DEADLINE_S)
    assert response.status_code == 401
    # A member's garbage after it: once its entry is there, the stranger's would be too.
    member = httpx.post(team.resource, content=garbage, headers=headers, timeout=DEADLINE_S)
    assert member.status_code == 400
    added = _audited(team, before + 1)[before:]
    assert [(e["event"], e["reason"]) for e in added] == [("request_refused", "parse_error")]


def test_a_client_that_leaves_while_the_upstream_still_starts_lets_the_gateway_exit_0(
    setup: GatewaySetup,
) -> None:
    # Initialize and leave at once: the child is still starting (the warm-up's connection is
    # being made). The gateway must stop it and exit, not wait for it forever.
    with raw_gateway(setup):
        pass


def test_an_oversized_body_is_refused_and_audited_as_too_large(team: TeamGateway) -> None:
    headers = _session(team, team.issuer.mint("alice"))
    before = len(team.gateway_audit())
    body = _PING + b',"params":{"x":"' + b"x" * MAX_LINE_BYTES + b'"}}'
    response = httpx.post(team.resource, content=body, headers=headers, timeout=DEADLINE_S)
    assert response.status_code == 413
    added = _audited(team, before + 1)[before:]
    assert [(e["event"], e["reason"]) for e in added] == [("request_refused", "request_too_large")]
