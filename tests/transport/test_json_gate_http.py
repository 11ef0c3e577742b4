"""The JSON gate as an ASGI layer (json_gate_http.py), in front of a recording app."""

from __future__ import annotations

import json
from typing import Any

import httpx

from engram_memory.contract.refusals import RefusalReason
from engram_memory.transport.json_gate import ARGUMENT_DEFECT, ArgumentDefect, GateRefusal
from engram_memory.transport.json_gate_http import HANDLER_REACHED, JsonGate

CALL = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
    b'"params":{"name":"t","arguments":{"a":1,"a":2}}}'
)


class _Recorder:
    """The app behind the gate: records the body and flag it saw, answers `reply`."""

    def __init__(
        self, reply: bytes = b"{}", content_type: bytes = b"application/json", status: int = 200
    ) -> None:
        self.bodies: list[bytes] = []
        self.flags: list[bool] = []
        self.reply, self.content_type, self.status = reply, content_type, status

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        self.flags.append(ARGUMENT_DEFECT.get())
        headers = [
            (b"content-type", self.content_type),
            (b"content-length", b"%d" % len(self.reply)),
        ]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.reply})


def _gate(
    app: _Recorder, refusals: list[tuple[GateRefusal, str]], max_body: int = 1 << 20
) -> JsonGate:
    async def on_refusal(refusal: GateRefusal, peer: str) -> None:
        refusals.append((refusal, peer))

    return JsonGate(app, max_body=max_body, accepts=lambda _m: True, on_refusal=on_refusal)


async def _post(gate: JsonGate, body: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=gate)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.post("/mcp", content=body)


async def test_an_admitted_body_is_handed_on_byte_for_byte_with_its_flag() -> None:
    app, refusals = _Recorder(), []
    gate = _gate(app, refusals)
    await _post(gate, CALL)
    plain = CALL.replace(b',"a":2', b"")
    await _post(gate, plain)
    assert app.bodies == [CALL, plain]
    assert app.flags == [ArgumentDefect.DUPLICATE_KEYS, None]
    assert refusals == []
    assert ARGUMENT_DEFECT.get() is None  # the flag does not outlive its request


async def test_a_refused_body_is_answered_400_with_the_constant_error_and_never_handed_on() -> None:
    app, refusals = _Recorder(), []
    response = await _post(_gate(app, refusals), b'{"jsonrpc":"2.0","id":1,"method":"\xff"}')
    assert response.status_code == 400
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error"},
    }
    assert app.bodies == []
    assert [(refusal.code, peer) for refusal, peer in refusals] == [(-32700, "127.0.0.1")]


async def test_a_body_over_the_limit_is_handed_on_unjudged() -> None:
    app, refusals = _Recorder(), []
    await _post(_gate(app, refusals, max_body=8), b"not json at all, and long")
    assert app.bodies == [b"not json at all, and long"]
    assert refusals == []


async def test_an_error_with_data_from_the_app_leaves_constant() -> None:
    leaky = {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32601, "message": "No x/secret", "data": "x/secret"},
    }
    app = _Recorder(json.dumps(leaky).encode())
    response = await _post(_gate(app, []), b'{"jsonrpc":"2.0","id":3,"method":"x/secret"}')
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32601, "message": "Method not found"},
    }
    assert int(response.headers["content-length"]) == len(response.content)


async def test_an_error_event_with_data_in_a_stream_leaves_constant() -> None:
    leaky = {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32602, "message": "bad secret", "data": {"v": "secret"}},
    }
    event = b"event: message\r\ndata: " + json.dumps(leaky).encode() + b"\r\n\r\n"
    app = _Recorder(event, content_type=b"text/event-stream")
    response = await _post(_gate(app, []), b'{"jsonrpc":"2.0","id":3,"method":"ping"}')
    assert b"secret" not in response.content
    data = next(line for line in response.text.splitlines() if line.startswith("data:"))
    assert json.loads(data[5:])["error"] == {"code": -32602, "message": "Invalid params"}


async def test_the_services_own_constant_errors_pass_unchanged() -> None:
    ours = {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32000, "message": "The policy service is unavailable."},
    }
    app = _Recorder(json.dumps(ours).encode())
    response = await _post(_gate(app, []), b'{"jsonrpc":"2.0","id":3,"method":"tools/list"}')
    assert response.json() == ours


async def test_a_request_the_app_answers_4xx_is_handed_to_the_audit_after_its_answer() -> None:
    # As the SDK's transport answers a request without a session: 400, before any handler.
    missing = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session ID required"}}'
    app, refusals = _Recorder(reply=missing, status=400), []
    gate = _gate(app, refusals)
    response = await _post(gate, b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}')
    assert response.status_code == 400
    assert [(r.reason, r.method, peer) for r, peer in refusals] == [
        (RefusalReason.INVALID_REQUEST, "tools/list", "127.0.0.1")
    ]


async def test_a_request_the_app_serves_is_not_audited_by_the_gate() -> None:
    app, refusals = _Recorder(status=202), []
    await _post(_gate(app, refusals), b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    assert refusals == []


async def test_a_4xx_answer_to_a_request_a_handler_saw_is_left_to_the_handlers_audit() -> None:
    async def handled(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        scope[HANDLER_REACHED] = True  # what the server's middleware marks (mcp_server.py)
        await send({"type": "http.response.start", "status": 400, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    refusals: list[tuple[GateRefusal, str]] = []

    async def on_refusal(refusal: GateRefusal, peer: str) -> None:
        refusals.append((refusal, peer))

    gate = JsonGate(handled, max_body=1 << 20, accepts=lambda _m: True, on_refusal=on_refusal)
    response = await _post(gate, b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}')
    assert response.status_code == 400
    assert refusals == []
