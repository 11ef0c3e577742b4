"""The JSON gate (json_gate.py) in front of streamable HTTP, as an ASGI layer.

A POST's body is read whole (up to `max_body` bytes), judged on its raw bytes, and either
answered here (HTTP 400 with the constant JSON-RPC error, as the SDK answers its own parse
errors) or handed on to the SDK as the very same bytes, with the gate's duplicate-argument-key
flag set in the request's context (the SDK snapshots it with the message). A body larger
than `max_body` is handed on unread, for the SDK's own size limit to refuse.

A request the SDK's transport refuses itself (a 4xx answer: no or an unknown session, a
protocol version or headers it does not accept, a Host or Origin not allowed) is handed to
the host-level audit stream once answered, like the gate's own refusals.

On the way out, every JSON-RPC error in a response (a JSON body or an SSE event) is made
constant: no data, a message from the fixed set (contract/errors.py); the SDK builds some
of its errors outside any middleware, with the request's text in them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from engram_memory.contract.errors import wire_error_message
from engram_memory.contract.refusals import RefusalReason
from engram_memory.transport.json_gate import (
    ARGUMENT_DEFECT,
    INVALID_REQUEST,
    GateRefusal,
    inspect_message,
    protocol_method,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
OnRefusal = Callable[[GateRefusal, str], Awaitable[None]]
# Set in a request's ASGI scope once a protocol handler saw it (mcp_server.py middleware).
HANDLER_REACHED = "engram.handler_reached"


class JsonGate:
    """ASGI layer: strict JSON for POSTed requests, constant errors in every response."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body: int,
        accepts: Callable[[object], bool],
        on_refusal: OnRefusal,
    ) -> None:
        self._app, self._max_body = app, max_body
        self._accepts, self._on_refusal = accepts, on_refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        send = _ConstantErrorSend(send)
        if scope["method"] != "POST":
            await self._app(scope, receive, send)
            await self._audit_transport_refusal(scope, send.status, "other")
            return
        chunks, complete = await _read_body(receive, self._max_body)
        replay = _Replay(chunks, receive)
        if not complete:  # too large, or the client left: the SDK answers (or not) as usual
            await self._app(scope, replay, send)
            return
        verdict = inspect_message(b"".join(chunks), accepts=self._accepts)
        if isinstance(verdict, GateRefusal):
            await _send_json(send, 400, verdict.answer_bytes())
            await self._on_refusal(verdict, _peer(scope))
            return
        if verdict.forward is not None:  # the gate's re-encoding (json_gate.py: surrogates)
            replay = _Replay([verdict.forward], receive)
        flag = ARGUMENT_DEFECT.set(verdict.argument_defect)
        try:
            await self._app(scope, replay, send)
        finally:
            ARGUMENT_DEFECT.reset(flag)
        message = verdict.message
        method = protocol_method(message.get("method") if isinstance(message, dict) else None)
        await self._audit_transport_refusal(scope, send.status, method)

    async def _audit_transport_refusal(self, scope: Scope, status: int, method: str) -> None:
        """Record a request the SDK's transport refused (answered by now) in the host stream.

        The SDK refuses some requests before any handler runs, where the server's own
        middleware never sees them: no or an unknown session (400/404), an unacceptable
        Accept or Content-Type (406/400), a protocol version it does not serve (400), a Host
        or Origin not allowed (421/403). Each is a refusal before binding (issue 9: "requests
        the SDK rejects" leave a trace); its 4xx status is how it shows here. A request that
        reached a handler was audited there (`mark_handler_reached`), whatever its status.
        """
        if not 400 <= status < 500 or scope.get(HANDLER_REACHED):
            return
        reason = RefusalReason.REQUEST_TOO_LARGE if status == 413 else RefusalReason.INVALID_REQUEST
        refusal = GateRefusal(INVALID_REQUEST, None, reason, method)
        await self._on_refusal(refusal, _peer(scope))


def mark_handler_reached(request: object) -> None:
    """Mark the HTTP request behind a handler's context as seen by a handler (which audits
    its own refusals), so the gate does not record its 4xx answer a second time. `request`
    is the Starlette request over HTTP (its scope is the one the gate passed on), else None."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, MutableMapping):
        scope[HANDLER_REACHED] = True


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


async def _read_body(receive: Receive, limit: int) -> tuple[list[bytes], bool]:
    """The body's chunks read so far, and whether that is the whole body within `limit`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return chunks, False  # disconnected
        chunk = bytes(message.get("body", b""))
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return chunks, False
        if not message.get("more_body", False):
            return chunks, True


class _Replay:
    """`receive` for the app behind the gate: the chunks already read, then the rest."""

    def __init__(self, chunks: list[bytes], receive: Receive) -> None:
        self._chunks, self._receive = list(chunks), receive
        self._replayed = not chunks

    async def __call__(self) -> Message:
        if not self._replayed:
            self._replayed = True
            body = b"".join(self._chunks)
            return {"type": "http.request", "body": body, "more_body": False}
        return await self._receive()


async def _send_json(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _constant_error_body(body: bytes) -> bytes:
    """`body` (one JSON text) with a JSON-RPC error in it made constant; else unchanged."""
    if b'"error"' not in body:
        return body  # a result or an acknowledgment: not parsed again
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if not isinstance(message, dict) or not isinstance(message.get("error"), dict):
        return body
    error = message["error"]
    code = error.get("code")
    if not isinstance(code, int):
        return body
    text = error.get("message")
    constant = {
        "code": code,
        "message": wire_error_message(code, text if isinstance(text, str) else ""),
    }
    if error == constant:
        return body
    return json.dumps({**message, "error": constant}, separators=(",", ":")).encode()


def _constant_sse_chunk(chunk: bytes) -> bytes:
    """An SSE chunk with each `data:` line's JSON-RPC error made constant."""
    if b'"error"' not in chunk:
        return chunk
    lines = chunk.split(b"\n")
    for index, line in enumerate(lines):
        if line.startswith(b"data:"):
            ending = b"\r" if line.endswith(b"\r") else b""
            payload = line[5:].removesuffix(b"\r").strip()
            lines[index] = b"data: " + _constant_error_body(payload) + ending
    return b"\n".join(lines)


class _ConstantErrorSend:
    """`send` that rewrites JSON-RPC errors in JSON bodies and SSE events of the response."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status = 0  # the response's status once it started (0: none sent yet)
        self._kind = ""
        self._start: Message | None = None
        self._body: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message.get("status", 0))
            headers = dict(message.get("headers", []))
            content_type = bytes(headers.get(b"content-type", b"")).lower()
            if content_type.startswith(b"application/json"):
                self._kind, self._start = "json", message  # held until the body is complete
                return
            self._kind = "sse" if content_type.startswith(b"text/event-stream") else ""
        elif message["type"] == "http.response.body" and self._kind == "json":
            self._body.append(bytes(message.get("body", b"")))
            if message.get("more_body", False):
                return
            await self._send_json_response()
            return
        elif message["type"] == "http.response.body" and self._kind == "sse":
            body = _constant_sse_chunk(bytes(message.get("body", b"")))
            message = {**message, "body": body}
        await self._send(message)

    async def _send_json_response(self) -> None:
        assert self._start is not None
        body = _constant_error_body(b"".join(self._body))
        headers = [
            (name, str(len(body)).encode() if name.lower() == b"content-length" else value)
            for name, value in self._start.get("headers", [])
        ]
        await self._send({**self._start, "headers": headers})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})
