"""ASGI: the limits streamable HTTP needs in front of the MCP SDK's app.

- The body is read here, whole, before the SDK sees the request: a body above
  `max_request_bytes` gets 413 with a JSON-RPC error (`-32600`, no id) and the connection is
  closed; a client that drops the connection mid-body costs one log line (http_protocol.py),
  not the SDK's traceback, because the SDK is never called with half a body.
- Sessions are admitted here (http_sessions.py): at most `max_sessions` in all,
  `max_sessions_per_peer` not yet bound per client address and `max_sessions_per_principal`
  bound per principal. A new `initialize` over a limit first ends the oldest idle unbound
  session (of its address, or of anyone for the server's cap); only when there is none does
  it get 503 with the JSON-RPC error `-32000` (retriable). A session that no valid invocation
  context reached within `unbound_session_seconds` ends, and so does one idle
  `session_idle_seconds`; all end through the SDK's own DELETE, so the SDK forgets them as if
  the client had asked.
- Each of those refusals is handed to the host-level audit stream after it was answered.

The invocation context is verified (signature, trusted key, expiry), never spent: only
`tools/list` and `tools/call` spend a token.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram_memory.contract.exceptions import RequestTooLarge, TokenInvalid
from engram_memory.contract.refusals import PreBindingRefusal, RefusalReason
from engram_memory.host.context import INVOCATION_META_KEY, verify_invocation
from engram_memory.host.keys import HostKeyring
from engram_memory.transport.http_sessions import Expiry, Session, SessionTable
from engram_memory.transport.http_settings import HttpSettings

log = logging.getLogger("engram_memory.http")

SESSION_HEADER = b"mcp-session-id"
# JSON-RPC errors of this layer: constant, no id (the request was not read or not parsed),
# no data. -32000 is the implementation-defined "retry later": the session limit passes.
_TOO_LARGE = (413, -32600, "Request too large")
_SESSION_LIMIT = (503, -32000, "Too many open sessions")
# Refusals are audited off the event loop, a few at a time: a flood waits, serving does not.
_AUDIT_LIMIT = anyio.CapacityLimiter(2)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _messages(body: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of `body`, or none when it is not JSON (the SDK answers that)."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return []
    items = parsed if isinstance(parsed, list) else [parsed]
    return [item for item in items if isinstance(item, dict)]


def _token(message: dict[str, Any]) -> object:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get(INVOCATION_META_KEY) if isinstance(meta, dict) else None


async def _answer(send: Send, status: int, code: int, message: str, close: bool) -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class TransportGuard:
    """ASGI middleware enforcing `settings` around the MCP app (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        settings: HttpSettings,
        keyring: HostKeyring,
        on_refusal: Callable[[PreBindingRefusal], None],
        now_s: Callable[[], float],
        sessions: SessionTable | None = None,
    ) -> None:
        self._app, self._settings = app, settings
        self._keyring, self._on_refusal, self._now_s = keyring, on_refusal, now_s
        self.sessions = sessions or SessionTable(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            async with anyio.create_task_group() as group:
                group.start_soon(self._end_expired_sessions)
                await self._app(scope, receive, send)
                group.cancel_scope.cancel()
            return
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        try:
            body = await self._read_body(scope, receive)
        except RequestTooLarge:
            await _answer(send, *_TOO_LARGE, close=True)
            await self._audit(scope, RefusalReason.REQUEST_TOO_LARGE)
            return
        if body is None:
            return  # the client went away: nobody to answer; http_protocol.py logged the line
        replay = _replaying(body, receive)
        session_id = _header(scope, SESSION_HEADER)
        if session_id is not None:
            await self._serve_in_session(session_id, body, scope, replay, send)
        elif scope.get("method") == "POST" and (b"initialize" in body or b"\\u" in body):
            # (An escaped method name is only found by parsing: parse whenever one may hide.)
            await self._open_session(body, scope, replay, send)
        else:
            await self._serve_without_session(scope, replay, send)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None when the client went away before it was complete.

        Raises:
            RequestTooLarge: declared or sent beyond the limit.
        """
        declared = _header(scope, b"content-length")
        limit = self._settings.max_request_bytes
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise RequestTooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > limit:
                raise RequestTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _principal(self, messages: list[dict[str, Any]]) -> str | None:
        """ "tenant/principal" of the first valid invocation context among `messages`."""
        for message in messages:
            try:
                context = verify_invocation(_token(message), self._keyring, self._now_s())
            except TokenInvalid:
                continue
            return f"{context.tenant}/{context.principal}"
        return None

    async def _open_session(self, body: bytes, scope: Scope, receive: Receive, send: Send) -> None:
        peer = _peer(scope)
        messages = _messages(body)
        if not any(message.get("method") == "initialize" for message in messages):
            await self._serve_without_session(scope, receive, send)  # not an opening after all
            return
        admission = self.sessions.reserve(peer)
        if admission.refused is not None:
            await _answer(send, *_SESSION_LIMIT, close=False)
            await self._audit(scope, admission.refused, method="initialize")
            return
        if admission.evict is not None:
            evicted_id, evicted = admission.evict
            try:
                await self._end(evicted_id, evicted)
                await self._audit(evicted.scope, RefusalReason.SESSION_LIMIT, method="initialize")
            except BaseException:
                self.sessions.release(peer)
                raise
        opened: list[str] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                session_id = _header(message, SESSION_HEADER)
                if session_id is not None:
                    # Known before the client can use it: its next request may bind it.
                    principal = self._principal(messages)
                    delete = _delete_scope(scope, session_id)
                    self.sessions.opened(peer, session_id, principal, delete)
                    self.sessions.begin(session_id)
                    opened.append(session_id)
            await send(message)

        try:
            await self._app(scope, receive, watch)
        finally:
            if opened:
                self.sessions.end(opened[0])
            else:
                self.sessions.release(peer)

    async def _serve_without_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request outside any session; should the SDK open one all the same, it is
        tracked (and, unbound, ends) like any other."""

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                session_id = _header(message, SESSION_HEADER)
                if session_id is not None and self.sessions.get(session_id) is None:
                    delete = _delete_scope(scope, session_id)
                    self.sessions.adopt(_peer(scope), session_id, delete)
            await send(message)

        await self._app(scope, receive, watch)

    async def _serve_in_session(
        self, session_id: str, body: bytes, scope: Scope, receive: Receive, send: Send
    ) -> None:
        session = self.sessions.get(session_id)
        if session is not None and not session.bound:
            principal = self._principal(_messages(body))
            if principal is not None:
                self.sessions.bind(session_id, principal)
        status: list[int] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        self.sessions.begin(session_id)
        try:
            await self._app(scope, receive, watch)
        finally:
            self.sessions.end(session_id)
            ended = scope.get("method") == "DELETE" and status and status[0] < 300
            if ended or (status and status[0] == 404):
                self.sessions.forget(session_id)  # the client ended it, or the SDK lost it

    async def _end_expired_sessions(self) -> None:
        tick = min(1.0, self._settings.unbound_session_seconds / 4)
        while True:
            await anyio.sleep(tick)
            for session_id, session, why in self.sessions.take_expired():
                await self._end(session_id, session)
                if why is Expiry.UNBOUND:
                    await self._audit(
                        session.scope, RefusalReason.SESSION_WITHOUT_CONTEXT, method="initialize"
                    )

    async def _end(self, session_id: str, session: Session) -> None:
        """End the session the way a client would: DELETE with its id."""
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await anyio.sleep_forever()
            raise AssertionError  # unreachable

        async def discard(message: Message) -> None:
            return None

        try:
            with anyio.fail_after(10, shield=True):
                await self._app(dict(session.scope), receive, discard)
        except TimeoutError:
            log.warning("an expired session did not end within 10 s")

    async def _audit(self, scope: Scope, reason: RefusalReason, method: str = "other") -> None:
        refusal = PreBindingRefusal("http", _peer(scope), method, reason)
        try:
            await anyio.to_thread.run_sync(self._on_refusal, refusal, limiter=_AUDIT_LIMIT)
        except Exception:  # noqa: BLE001 - it must never raise; if it does, serving goes on
            log.error("a transport refusal could not be handed to the audit stream")


def _replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` for the app: the body read already, then the connection's own messages
    (the SDK waits on them to notice a client going away)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _delete_scope(scope: Scope, session_id: str) -> dict[str, Any]:
    kept = [(k, v) for k, v in scope.get("headers", ()) if k in (b"host", b"origin")]
    return {
        **{k: v for k, v in scope.items() if k not in ("headers", "state")},
        "method": "DELETE",
        "headers": [*kept, (SESSION_HEADER, session_id.encode("latin-1"))],
        "state": {},
    }
