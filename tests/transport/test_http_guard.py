"""The transport guard in front of the MCP app: the body is read (and bounded) before the app
sees it, half bodies never reach the app, and session refusals go to the audit hook."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio

from engram_memory.contract.refusals import PreBindingRefusal, RefusalReason
from engram_memory.host.keys import HostKeyring
from engram_memory.transport.http_guard import TransportGuard
from engram_memory.transport.http_protocol import LogBudget
from engram_memory.transport.http_settings import HttpSettings

INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})


class FakeApp:
    """Answers 200, with a fresh session id to an initialize; records what it was given."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.sessions = 0
        self.deleted: list[bytes] = []  # session ids ended through the app (DELETE)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        if scope.get("method") == "DELETE":
            self.deleted.append(dict(scope["headers"])[b"mcp-session-id"])
        self.bodies.append(message["body"])
        headers = []
        if b"initialize" in message["body"]:
            self.sessions += 1
            headers.append((b"mcp-session-id", f"s{self.sessions}".encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})


def _guard(app: FakeApp, refusals: list[PreBindingRefusal], **limits: Any) -> TransportGuard:
    return TransportGuard(
        app,  # type: ignore[arg-type]
        HttpSettings(**limits),
        keyring=HostKeyring.__new__(HostKeyring),
        on_refusal=refusals.append,
        now_s=lambda: 0.0,
    )


async def _request(
    guard: TransportGuard, chunks: list[bytes], headers: list[tuple[bytes, bytes]] | None = None
) -> list[dict[str, Any]]:
    pending: Iterator[bytes] = iter(chunks)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        chunk = next(pending, None)
        if chunk is None:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": chunk, "more_body": chunk is not chunks[-1]}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "client": ("127.0.0.9", 5000),
        "headers": headers or [],
    }
    await guard(scope, receive, send)
    return sent


def _status(sent: list[dict[str, Any]]) -> int:
    return int(sent[0]["status"])


def _rpc_code(sent: list[dict[str, Any]]) -> int:
    return int(json.loads(sent[1]["body"])["error"]["code"])


async def test_a_body_over_the_cap_is_413_and_never_reaches_the_app() -> None:
    app, refusals = FakeApp(), []  # type: ignore[var-annotated]
    guard = _guard(app, refusals, max_request_bytes=10)
    sent = await _request(guard, [b"12345", b"678901"])
    assert (_status(sent), _rpc_code(sent)) == (413, -32600)
    declared = await _request(guard, [b"1"], headers=[(b"content-length", b"11")])
    assert _status(declared) == 413
    assert app.bodies == []
    assert [r.reason for r in refusals] == [RefusalReason.REQUEST_TOO_LARGE] * 2
    assert refusals[0].peer == "127.0.0.9"


async def test_a_client_gone_mid_body_is_not_answered_and_the_app_never_sees_it() -> None:
    app, refusals = FakeApp(), []  # type: ignore[var-annotated]
    guard = _guard(app, refusals)
    pending = [b'{"jsonrpc":', b"never sent"]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if len(pending) == 2:
            return {"type": "http.request", "body": pending.pop(0), "more_body": True}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "client": ("127.0.0.9", 1), "headers": []}
    await guard(scope, receive, send)
    assert (sent, app.bodies, refusals) == ([], [], [])


async def test_a_whole_body_reaches_the_app_in_one_piece() -> None:
    app, refusals = FakeApp(), []  # type: ignore[var-annotated]
    sent = await _request(_guard(app, refusals), [b'{"jsonrpc":', b'"2.0"}'])
    assert _status(sent) == 200
    assert app.bodies == [b'{"jsonrpc":"2.0"}']


async def test_an_initialize_over_the_peer_cap_ends_the_oldest_unbound_session_first() -> None:
    app, refusals = FakeApp(), []  # type: ignore[var-annotated]
    guard = _guard(app, refusals, max_sessions_per_peer=2)
    for _ in range(3):
        assert _status(await _request(guard, [INITIALIZE.encode()])) == 200
    assert app.sessions == 3
    assert app.deleted == [b"s1"]  # ended through the SDK's own DELETE, as a client would
    assert [(r.reason, r.method, r.transport) for r in refusals] == [
        (RefusalReason.SESSION_LIMIT, "initialize", "http")
    ]
    assert len(guard.sessions) == 2
    assert guard.sessions.get("s1") is None


async def test_an_escaped_initialize_is_still_counted_against_the_caps() -> None:
    app, refusals = FakeApp(), []  # type: ignore[var-annotated]
    guard = _guard(app, refusals, max_sessions_per_peer=1)
    escaped = INITIALIZE.replace('"initialize"', '"\\u0069nitialize"').encode()
    assert b"initialize" not in escaped
    assert _status(await _request(guard, [INITIALIZE.encode()])) == 200
    assert _status(await _request(guard, [escaped])) == 200
    assert app.deleted == [b"s1"]  # it took the address's one unbound place


async def test_an_initialize_with_no_session_to_end_is_503_retriable_and_audited() -> None:
    app, refusals = FakeApp(), []  # type: ignore[var-annotated]
    guard = _guard(app, refusals, max_sessions_per_peer=1)
    assert _status(await _request(guard, [INITIALIZE.encode()])) == 200
    guard.sessions.begin("s1")  # e.g. its GET stream is open: not idle, not ended
    refused = await _request(guard, [INITIALIZE.encode()])
    assert (_status(refused), _rpc_code(refused)) == (503, -32000)
    assert (app.sessions, app.deleted) == (1, [])
    assert [(r.reason, r.method) for r in refusals] == [(RefusalReason.SESSION_LIMIT, "initialize")]


async def test_an_unbound_session_is_ended_through_the_app_and_audited() -> None:
    app, refusals = FakeApp(), []  # type: ignore[var-annotated]
    guard = _guard(app, refusals, unbound_session_seconds=0.05)
    assert _status(await _request(guard, [INITIALIZE.encode()])) == 200
    deleted: list[dict[str, Any]] = []

    async def inner_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            with anyio.fail_after(10):
                while not refusals:
                    await anyio.sleep(0.01)
            return
        deleted.append(scope)

    guard._app = inner_app  # the lifespan runs the reaper around the app's own lifespan
    await guard({"type": "lifespan"}, None, None)  # type: ignore[arg-type]
    assert [(s["method"], dict(s["headers"])[b"mcp-session-id"]) for s in deleted] == [
        ("DELETE", b"s1")
    ]
    assert [r.reason for r in refusals] == [RefusalReason.SESSION_WITHOUT_CONTEXT]
    assert len(guard.sessions) == 0


def test_the_log_budget_reports_a_flood_as_a_count() -> None:
    now = [0.0]
    budget = LogBudget(per_minute=2, clock=lambda: now[0])
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("engram_memory.http")
    handler = Collect()
    logger.addHandler(handler)
    try:
        for _ in range(5):
            budget.warn("dropped")
        now[0] = 61
        budget.warn("dropped")
    finally:
        logger.removeHandler(handler)
    assert lines == [
        "dropped",
        "dropped",
        "3 more such lines suppressed in the last minute",
        "dropped",
    ]
