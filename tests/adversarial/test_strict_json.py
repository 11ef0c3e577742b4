"""Strict JSON at the door (issue 9 item 2): hostile bytes to the real server, stdio and HTTP.

Each malformed message is answered (never left waiting) with the JSON-RPC code JSON-RPC 2.0
prescribes, a constant message and no data, and the server keeps serving a legitimate
call right after it. Duplicate keys inside a tool call's arguments go through the normal
call path: INVALID_SCHEMA with a valid token, -32603 with an invalid one.

The audit trace, read as an auditor would once the server stopped: every refused message is a
host-stream entry (`scope_ref = 'host'`) with its reason (parse_error, invalid_request,
duplicate_keys, request_too_large), transport and peer; a flood of them is bounded to `burst`
entries and one summary whose counts add up exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_memory.client.reference_host import connect
from engram_memory.host.context import INVOCATION_META_KEY
from tests.adversarial.refusal_support import (
    host_entries,
    refused_count,
)
from tests.adversarial.wire import (
    ALICE,
    RawHttp,
    RawStdio,
    Secrets,
    make_secrets,
    raw_stdio,
    search_call,
    serving_http,
)

PARSE_ERROR, INVALID_REQUEST = -32700, -32600

Exchange = Callable[[bytes], dict[str, Any]]


def _nested(depth: int) -> bytes:
    """A ping whose params hold arrays nested so the whole message is `depth` deep."""
    inner = depth - 2  # the envelope object and params object count
    return (
        b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":'
        + b"[" * inner
        + b"]" * inner
        + b"}}"
    )


_PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"'
# (name, raw message, expected code, expected id, the reason the host audit stream records)
_MALFORMED: list[tuple[str, bytes, int, object, str]] = [
    ("not_utf8", _PING + b',"params":{"x":"\xff"}}', PARSE_ERROR, None, "parse_error"),
    (
        "utf8_encoded_surrogate",
        _PING + b',"params":{"x":"\xed\xa0\x80"}}',
        PARSE_ERROR,
        None,
        "parse_error",
    ),
    (
        "escaped_lone_surrogate",
        _PING + b',"params":{"x":"\\ud800"}}',
        PARSE_ERROR,
        None,
        "parse_error",
    ),
    (
        "lone_surrogate_in_a_key",
        _PING + b',"params":{"\\udc00":1}}',
        PARSE_ERROR,
        None,
        "parse_error",
    ),
    ("truncated_json", _PING + b',"params":{', PARSE_ERROR, None, "parse_error"),
    ("nan_literal", _PING + b',"params":{"x":NaN}}', PARSE_ERROR, None, "parse_error"),
    ("nested_one_past_the_limit", _nested(65), PARSE_ERROR, None, "parse_error"),
    ("nested_200_deep", _nested(200), PARSE_ERROR, None, "parse_error"),
    ("nested_100000_deep", b"[" * 100_000 + b"]" * 100_000, PARSE_ERROR, None, "parse_error"),
    ("batch_array", b"[" + _PING + b"}," + _PING + b"}]", INVALID_REQUEST, None, "invalid_request"),
    ("empty_batch", b"[]", INVALID_REQUEST, None, "invalid_request"),
    ("bare_number", b"42", INVALID_REQUEST, None, "invalid_request"),
    ("bare_null", b"null", INVALID_REQUEST, None, "invalid_request"),
    (
        "object_id",
        b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
        INVALID_REQUEST,
        None,
        "invalid_request",
    ),
    (
        "boolean_id",
        b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
        INVALID_REQUEST,
        None,
        "invalid_request",
    ),
    (
        "fractional_id",
        b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
        INVALID_REQUEST,
        None,
        "invalid_request",
    ),
    (
        "null_id",
        b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
        INVALID_REQUEST,
        None,
        "invalid_request",
    ),
    (
        "duplicate_id",
        b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
        INVALID_REQUEST,
        None,
        "duplicate_keys",
    ),
    (
        "duplicate_method",
        _PING + b',"method":"tools/list"}',
        INVALID_REQUEST,
        None,
        "duplicate_keys",
    ),
    (
        "wrong_jsonrpc_version",
        b'{"jsonrpc":"1.0","id":4,"method":"ping"}',
        INVALID_REQUEST,
        4,
        "invalid_request",
    ),
    (
        "method_not_a_string",
        b'{"jsonrpc":"2.0","id":4,"method":7}',
        INVALID_REQUEST,
        4,
        "invalid_request",
    ),
    (
        "params_an_array",
        b'{"jsonrpc":"2.0","id":4,"method":"ping","params":[1]}',
        INVALID_REQUEST,
        4,
        "invalid_request",
    ),
    ("response_without_result", b'{"jsonrpc":"2.0","id":4}', INVALID_REQUEST, 4, "invalid_request"),
    (
        "duplicate_key_in_params",
        b'{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"cursor":"a","cursor":"b"}}',
        INVALID_REQUEST,
        4,
        "duplicate_keys",
    ),
    (
        "duplicate_key_in_meta",
        b'{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta":{"k":1,"k":2}}}',
        INVALID_REQUEST,
        4,
        "duplicate_keys",
    ),
    (
        "duplicate_key_after_nfc_in_params",
        b'{"jsonrpc":"2.0","id":4,"method":"ping","params":{"\\u00e9":1,"e\\u0301":2}}',
        INVALID_REQUEST,
        4,
        "duplicate_keys",
    ),
    (
        "duplicate_key_in_a_notification",
        b'{"jsonrpc":"2.0","method":"notifications/initialized","params":{"a":1,"a":2}}',
        INVALID_REQUEST,
        None,
        "duplicate_keys",
    ),
]


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Secrets:
    return make_secrets(tmp_path_factory.mktemp("strict-json"))


@pytest.fixture(scope="module")
def http_url(secrets: Secrets, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Its own store: the stdio server of this module holds the other one.
    data_dir = tmp_path_factory.mktemp("http-data")
    with serving_http({**secrets.env, "ENGRAM_DATA_DIR": str(data_dir)}) as url:
        yield url


@pytest.fixture(scope="module")
def stdio(secrets: Secrets) -> Iterator[RawStdio]:
    with raw_stdio(secrets.env) as client:
        yield client


@pytest.fixture(scope="module", params=["stdio", "http"])
def exchange(request: pytest.FixtureRequest, secrets: Secrets) -> Iterator[Exchange]:
    """Send one raw message in an initialized session and return the answer; HTTP answers
    to refusals must be status 400 (what the SDK itself answers to a parse error)."""
    if request.param == "stdio":
        yield request.getfixturevalue("stdio").exchange
        return
    client = RawHttp(request.getfixturevalue("http_url"))

    def post(raw: bytes) -> dict[str, Any]:
        answer = client.post(raw)
        if "error" in answer.message and answer.message["error"]["code"] in (-32700, -32600):
            assert answer.status == 400
        return answer.message

    yield post
    client.close()


def _assert_constant_error(answer: dict[str, Any], code: int, request_id: object) -> None:
    assert answer["id"] == request_id
    assert answer["error"]["code"] == code
    assert set(answer["error"]) == {"code", "message"}  # no data


def _assert_still_served(exchange: Exchange, secrets: Secrets) -> None:
    answer = exchange(search_call(99, secrets.token()))
    assert answer["id"] == 99
    assert answer["result"]["structuredContent"]["ok"] is True


@pytest.mark.parametrize(
    ("raw", "code", "request_id"),
    [case[1:4] for case in _MALFORMED],
    ids=[case[0] for case in _MALFORMED],
)
def test_a_malformed_message_is_answered_with_a_constant_error_and_the_server_keeps_serving(
    exchange: Exchange, secrets: Secrets, raw: bytes, code: int, request_id: object
) -> None:
    _assert_constant_error(exchange(raw), code, request_id)
    _assert_still_served(exchange, secrets)


def test_nesting_at_the_documented_depth_is_accepted(exchange: Exchange) -> None:
    answer = exchange(_nested(64))
    assert answer == {"jsonrpc": "2.0", "id": 3, "result": {}}


def _call_with_arguments(request_id: int, arguments_json: str, token: str) -> bytes:
    meta = json.dumps({INVOCATION_META_KEY: token})
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":'
        f'{{"name":"engram_memory_search","arguments":{arguments_json},"_meta":{meta}}}}}'
    ).encode()


_PURPOSE = json.dumps(ALICE.purpose_ref)
_DUPLICATED_ARGUMENTS = {
    "raw_duplicate": f'{{"query":"a","query":"b","purpose_ref":{_PURPOSE}}}',
    "duplicate_after_nfc": f'{{"query":"a","purpose_ref":{_PURPOSE},"\\u00e9":1,"e\\u0301":2}}',
    "nested_duplicate": f'{{"query":"a","purpose_ref":{_PURPOSE},"filters":{{"k":1,"k":1}}}}',
    "duplicate_purpose": f'{{"query":"a","purpose_ref":"purpose:other","purpose_ref":{_PURPOSE}}}',
}


@pytest.mark.parametrize("arguments", _DUPLICATED_ARGUMENTS.values(), ids=_DUPLICATED_ARGUMENTS)
def test_duplicate_keys_in_a_tool_calls_arguments_are_an_invalid_schema_envelope(
    exchange: Exchange, secrets: Secrets, arguments: str
) -> None:
    answer = exchange(_call_with_arguments(7, arguments, secrets.token()))
    assert answer["id"] == 7
    envelope = answer["result"]["structuredContent"]
    assert envelope["ok"] is False
    assert envelope["error"]["code"] == "INVALID_SCHEMA"
    _assert_still_served(exchange, secrets)


# SPEC §3 (case 30): a lone surrogate inside a tool call's arguments is a schema error (an
# INVALID_SCHEMA envelope, audited), checked after the binding; anywhere else -32700 stays.
_SURROGATE_ARGUMENTS = {
    "in_a_value": f'{{"query":"a\\ud800","purpose_ref":{_PURPOSE}}}',
    "in_a_key": f'{{"query":"a","purpose_ref":{_PURPOSE},"\\udfff":1}}',
    "nested": f'{{"query":"a","purpose_ref":{_PURPOSE},"filters":{{"k":["\\udc00"]}}}}',
}


@pytest.mark.parametrize("arguments", _SURROGATE_ARGUMENTS.values(), ids=_SURROGATE_ARGUMENTS)
def test_a_lone_surrogate_in_a_tool_calls_arguments_is_an_invalid_schema_envelope(
    exchange: Exchange, secrets: Secrets, arguments: str
) -> None:
    answer = exchange(_call_with_arguments(17, arguments, secrets.token()))
    assert answer["id"] == 17
    envelope = answer["result"]["structuredContent"]
    assert (envelope["ok"], envelope["error"]["code"]) == (False, "INVALID_SCHEMA")
    _assert_still_served(exchange, secrets)


def test_a_lone_surrogate_in_the_arguments_with_an_invalid_token_is_refused_at_the_binding(
    exchange: Exchange, secrets: Secrets
) -> None:
    forged = secrets.token()[:-4] + "AAAA"
    answer = exchange(_call_with_arguments(18, _SURROGATE_ARGUMENTS["in_a_value"], forged))
    _assert_constant_error(answer, -32603, 18)
    _assert_still_served(exchange, secrets)


def test_duplicate_argument_keys_with_an_invalid_token_are_refused_at_the_binding_first(
    exchange: Exchange, secrets: Secrets
) -> None:
    forged = secrets.token()[:-4] + "AAAA"
    answer = exchange(_call_with_arguments(8, _DUPLICATED_ARGUMENTS["raw_duplicate"], forged))
    _assert_constant_error(answer, -32603, 8)
    _assert_still_served(exchange, secrets)


def test_the_same_arguments_without_duplicates_are_served(
    exchange: Exchange, secrets: Secrets
) -> None:
    arguments = f'{{"query":"a","purpose_ref":{_PURPOSE}}}'
    answer = exchange(_call_with_arguments(9, arguments, secrets.token()))
    assert answer["result"]["structuredContent"]["ok"] is True


def test_a_valid_notification_gets_no_answer_over_stdio(stdio: RawStdio, secrets: Secrets) -> None:
    stdio.send(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}')
    # The next message on the wire answers the next request, not the notification.
    assert stdio.exchange(search_call(10, secrets.token()))["id"] == 10


# Every refusal of an audited run is recorded one by one (no summary), in the order sent.
_NO_SUMMARY = {"ENGRAM_REFUSAL_BURST": "1000", "ENGRAM_HTTP_UNBOUND_SESSION_SECONDS": "600"}


def _assert_gate_trace(data_dir: Path, transport: str, peer: str) -> None:
    entries = host_entries(data_dir)
    if transport == "http":
        entries = entries
    assert [e["reason"] for e in entries] == [case[4] for case in _MALFORMED]
    assert {(e["transport"], e["peer"], e["occurrences"]) for e in entries} == {
        (transport, peer, 1)
    }


def test_every_malformed_stdio_line_leaves_its_reason_in_the_host_audit_stream(
    tmp_path: Path,
) -> None:
    secrets = make_secrets(tmp_path, **_NO_SUMMARY)
    with raw_stdio(secrets.env) as stdio:
        for _name, raw, code, request_id, _reason in _MALFORMED:
            _assert_constant_error(stdio.exchange(raw), code, request_id)
        _assert_still_served(stdio.exchange, secrets)
    _assert_gate_trace(tmp_path / "data", "stdio", "stdio")


async def test_every_malformed_http_body_is_audited_and_the_reference_host_is_served_after(
    tmp_path: Path,
) -> None:
    secrets = make_secrets(tmp_path, **_NO_SUMMARY)
    with serving_http(secrets.env) as url:
        client = RawHttp(url)
        try:
            for _name, raw, code, _id, _reason in _MALFORMED:
                answer = client.post(raw)
                assert (answer.status, answer.message["error"]["code"]) == (400, code)
        finally:
            client.close()
        async with connect(url, secrets.signer, ALICE) as host:
            outcome = await host.call(
                "engram_memory_search", {"query": "anything", "purpose_ref": ALICE.purpose_ref}
            )
        assert outcome.envelope["ok"] is True
    _assert_gate_trace(tmp_path / "data", "http", "127.0.0.1")


_FLOOD, _FLOOD_BURST = 300, 3


def test_a_flood_of_malformed_stdio_lines_grows_the_trail_by_a_bounded_exact_amount(
    tmp_path: Path,
) -> None:
    secrets = make_secrets(
        tmp_path, ENGRAM_REFUSAL_BURST=str(_FLOOD_BURST), ENGRAM_REFUSAL_INTERVAL_S="2"
    )
    with raw_stdio(secrets.env) as stdio:
        for _ in range(_FLOOD):
            stdio.send(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":NaN}}')
        answers = [stdio.receive() for _ in range(_FLOOD)]
        _assert_still_served(stdio.exchange, secrets)
    assert {(a["id"], a["error"]["code"]) for a in answers} == {(None, PARSE_ERROR)}
    # Written by the summary timer once the window ended, or at the latest at shutdown.
    entries = host_entries(tmp_path / "data")
    assert len(entries) == _FLOOD_BURST + 1  # the 300 lines fall in one window
    assert [e["occurrences"] for e in entries] == [1] * _FLOOD_BURST + [_FLOOD - _FLOOD_BURST]
    assert refused_count(entries, reason="parse_error", peer="stdio") == _FLOOD
    assert {(e["reason"], e["transport"]) for e in entries} == {("parse_error", "stdio")}


def test_a_stdio_line_over_the_request_size_cap_is_answered_and_the_server_keeps_serving(
    tmp_path: Path,
) -> None:
    secrets = make_secrets(tmp_path, ENGRAM_MAX_REQUEST_BYTES="4096")
    with raw_stdio(secrets.env) as stdio:
        # Sent in one write larger than the cap: never kept, answered once with id null.
        answer = stdio.exchange(search_call(7, secrets.token(), query="q" * 8000))
        assert answer["id"] is None
        assert answer["error"]["code"] == INVALID_REQUEST
        assert "data" not in answer["error"]
        served = stdio.exchange(search_call(8, secrets.token()))
        assert served["id"] == 8
        assert served["result"]["structuredContent"]["ok"] is True
    entries = host_entries(tmp_path / "data")
    assert [(e["reason"], e["transport"], e["peer"], e["occurrences"]) for e in entries] == [
        ("request_too_large", "stdio", "stdio", 1)
    ]
