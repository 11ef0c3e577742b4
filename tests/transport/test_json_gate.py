"""The JSON gate's verdicts on raw messages (json_gate.py); the wire is tested in
tests/adversarial/test_strict_json.py."""

from __future__ import annotations

import json

import pytest

from engram_memory.contract.refusals import RefusalReason
from engram_memory.transport.json_gate import (
    INVALID_REQUEST,
    MAX_NESTING_DEPTH,
    PARSE_ERROR,
    Admitted,
    ArgumentDefect,
    GateRefusal,
    inspect_message,
    protocol_method,
)

TOKEN = "header.claims.signature"


def _call(arguments: str, request_id: str = "1") -> bytes:
    meta = json.dumps({"engram-memory/invocation": TOKEN})
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
        f'"params":{{"name":"t","arguments":{arguments},"_meta":{meta}}}}}'
    ).encode()


def _nested_array(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _refused(raw: bytes) -> GateRefusal:
    verdict = inspect_message(raw)
    assert isinstance(verdict, GateRefusal)
    return verdict


def test_a_plain_request_is_admitted_without_a_duplicate_flag() -> None:
    verdict = inspect_message(_call('{"a":1}'))
    assert isinstance(verdict, Admitted)
    assert verdict.message == json.loads(_call('{"a":1}'))
    assert verdict.argument_defect is None
    assert verdict.forward is None


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff",
        b'"\xed\xa0\x80"',  # a surrogate encoded in UTF-8 is not UTF-8
        b'{"a":"\\ud800"}',
        b'{"\\udfff":1}',
        b'["\\ud800x"]',
        b"{",
        b"",
        b"NaN",
        b'{"a":-Infinity}',
        _nested_array(MAX_NESTING_DEPTH + 1),
        _nested_array(1_000_000),
    ],
)
def test_text_that_is_not_strict_json_is_a_parse_error_with_no_id(raw: bytes) -> None:
    refusal = _refused(raw)
    assert (refusal.code, refusal.request_id, refusal.reason) == (
        PARSE_ERROR,
        None,
        RefusalReason.PARSE_ERROR,
    )


def test_a_paired_surrogate_escape_is_an_ordinary_character() -> None:
    assert isinstance(inspect_message(_call('{"a":"\\ud83d\\ude00"}')), Admitted)


def test_nesting_at_the_documented_depth_is_admitted() -> None:
    # envelope (1) + params (2) + arguments (3) + arrays up to MAX_NESTING_DEPTH
    arrays = MAX_NESTING_DEPTH - 3
    assert isinstance(inspect_message(_call(f'{{"a":{_nested_array(arrays).decode()}}}')), Admitted)
    assert isinstance(_refused(_call(f'{{"a":{_nested_array(arrays + 1).decode()}}}')), GateRefusal)


@pytest.mark.parametrize(
    ("raw", "request_id"),
    [
        (b"[]", None),
        (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', None),
        (b"7", None),
        (b'"ping"', None),
        (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":false,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":2.5,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":1,"jsonrpc":"2.0","method":"ping"}', None),
        (b'{"jsonrpc":"2.0","method":"ping","method":"x"}', None),
        (b'{"id":3,"method":"ping"}', 3),
        (b'{"jsonrpc":2,"id":3,"method":"ping"}', 3),
        (b'{"jsonrpc":"2.0","id":"s","method":null}', "s"),
        (b'{"jsonrpc":"2.0","id":3,"method":"ping","params":"p"}', 3),
        (b'{"jsonrpc":"2.0","id":3}', 3),
        (b'{"jsonrpc":"2.0","id":3,"result":{},"error":{}}', 3),
        (b'{"jsonrpc":"2.0","result":{}}', None),
    ],
)
def test_json_that_is_not_a_request_is_an_invalid_request(raw: bytes, request_id: object) -> None:
    refusal = _refused(raw)
    assert (refusal.code, refusal.request_id) == (INVALID_REQUEST, request_id)


@pytest.mark.parametrize(
    "params",
    [
        '{"name":"t","name":"u","arguments":{}}',
        '{"name":"t","arguments":{},"_meta":{"k":1,"k":2}}',
        '{"name":"t","arguments":{},"_meta":{"o":{"\\u00c5":1,"A\\u030a":2}}}',
        '{"name":"t","arguments":{},"other":[{"x":1,"x":1}]}',
    ],
)
def test_duplicate_keys_outside_the_arguments_are_an_invalid_request_with_the_id(
    params: str,
) -> None:
    raw = f'{{"jsonrpc":"2.0","id":"r","method":"tools/call","params":{params}}}'.encode()
    refusal = _refused(raw)
    assert (refusal.code, refusal.request_id, refusal.reason) == (
        INVALID_REQUEST,
        "r",
        RefusalReason.DUPLICATE_KEYS,
    )
    assert refusal.method == "tools/call"


@pytest.mark.parametrize(
    "arguments",
    [
        '{"a":1,"a":1}',
        '{"\\u00e9":1,"e\\u0301":2}',
        '{"deep":[[{"x":{"k":1,"k":2}}]]}',
    ],
)
def test_duplicate_keys_inside_a_tool_calls_arguments_are_admitted_and_flagged(
    arguments: str,
) -> None:
    verdict = inspect_message(_call(arguments))
    assert isinstance(verdict, Admitted)
    assert verdict.argument_defect is ArgumentDefect.DUPLICATE_KEYS


@pytest.mark.parametrize(
    "arguments",
    ['{"a":"\\ud800"}', '{"\\udfff":1}', '{"deep":[["x\\udc00y"]],"b":1}'],
)
def test_a_lone_surrogate_inside_a_tool_calls_arguments_is_admitted_flagged_and_replaced(
    arguments: str,
) -> None:
    """SPEC §3 (case 30): an INVALID_SCHEMA envelope after the binding check, so the call is
    handed on, re-encoded without the surrogate (the SDK's parser would refuse it)."""
    verdict = inspect_message(_call(arguments))
    assert isinstance(verdict, Admitted)
    assert verdict.argument_defect is ArgumentDefect.UNPAIRED_SURROGATE
    assert verdict.forward is not None
    forwarded = json.loads(verdict.forward)
    assert "\ufffd" in json.dumps(forwarded["params"]["arguments"], ensure_ascii=False)
    assert forwarded["params"]["name"] == json.loads(_call("{}"))["params"]["name"]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x\\ud800","arguments":{}}}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"arguments":{"a":"\\ud800"}}}',
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call","params":{"arguments":{}}}',
    ],
)
def test_a_lone_surrogate_outside_a_tool_calls_arguments_stays_a_parse_error(raw: bytes) -> None:
    assert _refused(raw).code == PARSE_ERROR


def test_duplicate_keys_in_the_arguments_of_another_method_are_an_invalid_request() -> None:
    raw = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"arguments":{"a":1,"a":2}}}'
    assert _refused(raw).reason is RefusalReason.DUPLICATE_KEYS


def test_a_message_the_sdk_does_not_accept_is_an_invalid_request() -> None:
    verdict = inspect_message(_call('{"a":1}'), accepts=lambda _message: False)
    assert isinstance(verdict, GateRefusal)
    assert verdict.code == INVALID_REQUEST
    assert verdict.request_id == 1
    assert verdict.token == TOKEN


def test_the_answer_is_constant_and_carries_no_data() -> None:
    refusal = _refused(b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":[]}')
    answer = json.loads(refusal.answer_bytes())
    assert answer == {
        "jsonrpc": "2.0",
        "id": 9,
        "error": {"code": -32600, "message": "Invalid Request"},
    }


def test_only_protocol_method_names_are_kept() -> None:
    assert protocol_method("tools/call") == "tools/call"
    assert protocol_method("tools/call-with-my-secret") == "other"
    assert protocol_method(7) == "other"


@pytest.mark.parametrize(
    "result",
    [
        '{"action":"decline","action":"accept"}',
        '{"action":"accept","content":{"confirm":false,"confirm":true}}',
        '{"action":"accept","_meta":{"caf\\u00e9":1,"cafe\\u0301":2}}',
    ],
)
def test_a_response_with_a_duplicate_key_is_handed_on_as_an_invalid_request_error(
    result: str,
) -> None:
    """An answer to a server request is judged as strictly as a request (issue 23): the SDK
    would keep the last value, so the request waiting for it gets -32600 instead."""
    verdict = inspect_message(f'{{"jsonrpc":"2.0","id":7,"result":{result}}}'.encode())
    assert isinstance(verdict, Admitted)
    assert verdict.forward is not None
    assert json.loads(verdict.forward) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": INVALID_REQUEST, "message": "Invalid Request"},
    }
