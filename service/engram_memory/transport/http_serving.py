"""Streamable HTTP serving around the MCP app: bind first, drain on a stop signal.

The MCP wiring itself is in mcp_server.py; this module knows uvicorn and ASGI only.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from engram_memory.transport.http_protocol import guarded_protocol
from engram_memory.transport.http_settings import HttpSettings
from engram_memory.transport.stopping import GracefulStop

HEALTH_PATH = "/healthz"


class HealthProbe:
    """ASGI: `GET`/`HEAD /healthz` answers 200 while serving and 503 once a stop began, with
    no body, before the JSON gate and the SDK: a readiness or liveness probe is not an MCP
    request, so it is neither refused by the SDK nor recorded in the audit trail."""

    def __init__(self, app: ASGIApp, stop: GracefulStop) -> None:
        self._app, self._stop = app, stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("path") != HEALTH_PATH
            or scope.get("method") not in ("GET", "HEAD")
        ):
            await self._app(scope, receive, send)
            return
        status = 503 if self._stop.stopping else 200
        headers = [(b"content-length", b"0"), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


class AdmitWhileServing:
    """ASGI: each POST (one MCP exchange) counts in flight until its response is sent; once
    a stop began, a new one gets 503 with `Connection: close` (the client retries elsewhere)."""

    def __init__(self, app: ASGIApp, stop: GracefulStop) -> None:
        self._app, self._stop = app, stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        call = object()
        if not self._stop.admit(call):
            headers = [(b"connection", b"close"), (b"retry-after", b"1"), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        try:
            await self._app(scope, receive, send)
        finally:
            self._stop.leave(call)


class DrainingServer(uvicorn.Server):
    """uvicorn, but a stop signal drains our calls first and is not re-raised afterwards.

    uvicorn's own handling re-raises the signal once it stopped, so the process died by
    SIGTERM (-15) before the store was closed, and SIGINT ended in a traceback.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        stop: GracefulStop,
        url: str,
        tls_handshake_timeout: float | None = None,
    ) -> None:
        super().__init__(config)
        self._stop = stop
        self._url = url
        self._signals = 0
        self._tls_handshake_timeout = tls_handshake_timeout

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler: only count here; `on_tick` acts on it inside the event loop.
        # (Not uvicorn's handler: sse-starlette hooks that one to cut every stream at once.)
        self._signals += 1

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.config.ssl is None or self._tls_handshake_timeout is None:
            await super().startup(sockets)
        else:
            # A TLS handshake happens before the HTTP protocol (and its deadlines) sees the
            # connection; asyncio bounds it at 60 s by default, and uvicorn offers no setting,
            # so its listening servers are created with ours here.
            loop = asyncio.get_running_loop()
            bounded = functools.partial(
                loop.create_server, ssl_handshake_timeout=self._tls_handshake_timeout
            )
            loop.create_server = bounded  # type: ignore[method-assign]
            try:
                await super().startup(sockets)
            finally:
                del loop.create_server
        if self.started:
            print(f"engram-memory: streamable HTTP on {self._url}", file=sys.stderr, flush=True)

    async def on_tick(self, counter: int) -> bool:
        if self._signals and not self._stop.stopping:
            self._stop.begin()
            for server in self.servers:
                server.close()  # no new connections while draining
        if self._signals > 1:
            self._stop.abandon()
        if self._stop.stopping and (self._stop.drained or self._stop.deadline_passed):
            self._stop.abandon()  # a no-op when drained
            self.should_exit = True  # uvicorn closes connections, sse streams end
        return await super().on_tick(counter)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def listen(host: str, port: int) -> socket.socket:
    """Bind the HTTP listening socket before anything else starts.

    Raises:
        OSError: the address is taken or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def write_port_file(path: Path, port: int) -> None:
    """Report the port `listen` bound (with port 0, the kernel's pick: a port nothing else can
    take between choosing and binding it, unlike one probed free and released). Written whole
    under a temporary name and renamed, so a reader never sees half a port.

    Raises:
        OSError: the file cannot be written.
    """
    scratch = path.with_name(f".{path.name}.partial")
    scratch.write_text(f"{port}\n", encoding="ascii")
    os.replace(scratch, path)


def serve_asgi(
    app: ASGIApp, settings: HttpSettings, port: int, stop: GracefulStop, path: str = "/mcp"
) -> DrainingServer:
    """uvicorn serving `app` on `settings.host`:`port` with `settings`' connection cap,
    deadlines and TLS (build a new one per start); `path` is the MCP endpoint it prints."""
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=port,
        http=guarded_protocol(settings),
        ssl_certfile=None if settings.tls_cert is None else str(settings.tls_cert),
        ssl_keyfile=None if settings.tls_key is None else str(settings.tls_key),
        lifespan="on",
        log_level="warning",
        access_log=False,
        # After our own drain only idle streams are left; this bounds their close.
        timeout_graceful_shutdown=3,
    )
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    url = f"{settings.scheme}://{host}:{port}{path}"
    return DrainingServer(config, stop, url, tls_handshake_timeout=settings.header_timeout_seconds)
