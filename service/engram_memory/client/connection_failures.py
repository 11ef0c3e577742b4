"""Why a host could not reach or keep the server, in one line for the human at the console.

The MCP SDK reports a refused connection, a server that exited at start-up or a TLS failure
as an ExceptionGroup (anyio and httpx nest task groups) around the real cause, which printed
as an 80-110-line traceback. `connect_explained` connects like `reference_host.connect` but
turns every such failure into a `ServerUnavailable` whose text names the problem and what to
do. A stdio server's stderr is kept in a file while it starts, so that a server that refuses
to start (its store held by another server, say) is reported by its own last line, not by
its whole output.

Host-side code, like reference_host.py: the server never imports it.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TextIO

import anyio
import httpx2
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client import Transport
from mcp_types import CONNECTION_CLOSED, METHOD_NOT_FOUND, REQUEST_TIMEOUT

from engram_memory.client.reference_host import Binding, ReferenceHost
from engram_memory.contract.exceptions import (
    SERVE_OPENING_FAILED,
    CannotConnect,
    ConnectionLost,
    ServerExited,
    ServerUnavailable,
)
from engram_memory.host.keys import HostSigningKey

# The MCP errors that mean the connection failed, not that the server refused the request.
TRANSPORT_CODES = frozenset({CONNECTION_CLOSED, REQUEST_TIMEOUT})
_RETRY_HINT = "a call under way may have committed: retry it with the same idempotency key"
_HELD_HINT = "stop that server, or connect to it over HTTP (`server.url`) instead"
# A line of the server's logging (cli.py: "%(levelname)s %(name)s: %(message)s").
_LOG_RECORD = re.compile(r"(DEBUG|INFO|WARNING) [\w.]+: ")
_SLOW_HINT = "is it running and answering? (`timeout_seconds` sets how long to wait)"


def is_transport_failure(error: MCPError) -> bool:
    """True when an `MCPError` says the connection failed, not that the server refused."""
    return error.code in TRANSPORT_CODES


class ServerLog:
    """A stdio server's stderr, in an append-only temporary file: read back without moving
    the offset the server writes at (`pread`), so it can be relayed or quoted at any time."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile("a+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._relayed = 0

    def _read(self, start: int) -> str:
        fd = self.file.fileno()
        return os.pread(fd, max(os.fstat(fd).st_size - start, 0), start).decode("utf-8", "replace")

    def relay(self, to: TextIO) -> None:
        """Copy what the server wrote since the last relay to `to`."""
        text = self._read(self._relayed)
        self._relayed += len(text.encode("utf-8", "replace"))
        if text:
            print(text, end="", file=to, flush=True)

    def last_words(self) -> str | None:
        """Why the server stopped, from what it wrote since the last relay: its CLI's own
        last line (`engram-memory: ...`), else its last line that is not a log record (a
        crash's exception, a foreign server's message; cut to 200 characters), else None."""
        lines = [line.strip() for line in self._read(self._relayed).splitlines() if line.strip()]
        for line in reversed(lines):
            if line.startswith("engram-memory: "):
                return line.removeprefix("engram-memory: ").removeprefix("configuration error: ")
        said = [line for line in lines if not _LOG_RECORD.match(line)]
        return said[-1][:200] if said else None

    def said_opening_failed(self) -> bool:
        """True when the server wrote that its service never opened (cli/serve.py): it
        answered `initialize` while opening, but no call reached the service."""
        return any(line.strip() == SERVE_OPENING_FAILED for line in self._read(0).splitlines())

    def close(self) -> None:
        self.file.close()


def describe(server: StdioServerParameters | str) -> str:
    """The server as the operator configured it, without credentials, query or fragment."""
    if isinstance(server, StdioServerParameters):
        return f"`{shlex.join([Path(server.command).name, *server.args])}`"
    try:
        url = httpx2.URL(server)
    except httpx2.InvalidURL:
        return "the configured URL"
    return str(url.copy_with(username=None, password=None, query=None, fragment=None))


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups, in order."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and what caused it (httpx wraps the socket's own error twice)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _network_cause(error: httpx2.TransportError) -> str:
    """What went wrong under an httpx transport error, with what to do about it."""
    for cause in _chain(error):
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused — is `engram-memory serve --transport http` running there?"
        if isinstance(cause, socket.gaierror):
            return "host name not found — check `server.url`"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate not trusted ({cause.verify_message}) — check `server.url`"
        if isinstance(cause, ssl.SSLError):
            if cause.reason == "WRONG_VERSION_NUMBER":
                return "TLS handshake failed: the server speaks plain HTTP — use http://"
            return f"TLS handshake failed ({cause.reason or type(cause).__name__})"
    if isinstance(error, httpx2.TimeoutException):
        return "timed out"
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}{': ' + text[:200] if text else ''}"


def explain(
    exc: BaseException,
    server: StdioServerParameters | str,
    *,
    connected: bool,
    timeout_s: float,
    log: ServerLog | None = None,
) -> ServerUnavailable | None:
    """The one-line failure that `exc` (raised while connecting, or by a call once
    `connected`) means, or None when it is not a connection failure (a refusal, a bug)."""
    where = describe(server)
    stdio = isinstance(server, StdioServerParameters)
    for leaf in _leaves(exc):
        if (
            isinstance(leaf, OSError)
            and isinstance(server, StdioServerParameters)
            and not connected
        ):
            # Raised by the spawn itself, before any task group: the command cannot run.
            what = leaf.filename or server.command
            reason = "not found" if isinstance(leaf, FileNotFoundError) else leaf.strerror
            return CannotConnect(
                f"cannot start the server: {what}: {reason} — check `server.command` and `.cwd`"
            )
        if isinstance(leaf, httpx2.TransportError | httpx2.InvalidURL):
            cause = _network_cause(leaf) if isinstance(leaf, httpx2.TransportError) else str(leaf)
            if not connected:
                return CannotConnect(f"cannot connect to {where}: {cause}")
            if isinstance(leaf, httpx2.ConnectError):
                return ConnectionLost(f"lost the connection to {where} (nothing sent): {cause}")
            return ConnectionLost(f"lost the connection to {where}: {cause}; {_RETRY_HINT}")
        if isinstance(leaf, MCPError):
            failure = _explain_mcp_error(leaf, where, stdio, connected, timeout_s, log)
            if failure is not None:
                return failure
    return None


def _explain_mcp_error(
    error: MCPError,
    where: str,
    stdio: bool,
    connected: bool,
    timeout_s: float,
    log: ServerLog | None,
) -> ServerUnavailable | None:
    words = log.last_words() if log is not None else None
    if error.code == REQUEST_TIMEOUT:
        if not connected:
            return CannotConnect(f"no answer from {where} within {timeout_s:g} s — {_SLOW_HINT}")
        return ConnectionLost(f"no answer from {where} within {timeout_s:g} s; {_RETRY_HINT}")
    if error.code == CONNECTION_CLOSED and stdio:
        said = words or f"{where} gave no reason on stderr"
        if not connected or (log is not None and log.said_opening_failed()):
            held = "held by another" in said or "in use" in said
            hint = f" — {_HELD_HINT}" if held else ""
            return ServerExited(f"the server exited at start-up: {said}{hint}")
        return ConnectionLost(f"the server exited: {said}; {_RETRY_HINT}")
    if error.code == CONNECTION_CLOSED:
        if not connected:
            return CannotConnect(f"cannot connect to {where}: the server closed the connection")
        return ConnectionLost(f"{where} closed the connection; {_RETRY_HINT}")
    if connected:
        return None  # the server answered: a refusal for the caller to handle
    if error.code == METHOD_NOT_FOUND and not stdio:
        return CannotConnect(
            f"cannot connect to {where}: no MCP endpoint at this path (HTTP 404) — "
            "`engram-memory serve` serves it at /mcp"
        )
    return CannotConnect(
        f"cannot connect to {where}: the MCP handshake failed ({error.code} {error.message})"
        " — is it an engram-memory MCP endpoint?"
    )


@asynccontextmanager
async def connect_explained(
    server: StdioServerParameters | str,
    signer: HostSigningKey,
    binding: Binding,
    *,
    timeout_s: float = 60.0,
    relay: TextIO | None = None,
) -> AsyncIterator[ReferenceHost]:
    """Connect over stdio or streamable HTTP like `reference_host.connect`, for a host that
    reports failures to a human: connecting and each request get `timeout_s`. A stdio
    server's stderr is relayed to `relay` (if given) once it has started and when the
    session ends, never after a failure, whose line quotes the server's last words instead.

    Raises:
        CannotConnect: nothing was sent (no server, TLS, not MCP, cannot start, timed out).
        ServerExited: the stdio server exited at start-up; the line gives its reason.
        ConnectionLost: the connection failed or a request got no answer in `timeout_s`.
    """
    log: ServerLog | None = None
    transport: Transport | str
    if isinstance(server, StdioServerParameters):
        log = ServerLog()
        transport = stdio_client(server, errlog=log.file)
    else:
        transport = server
    connected = False
    # The start-up deadline; once connected, each request has `read_timeout_seconds`.
    deadline = anyio.CancelScope(deadline=anyio.current_time() + timeout_s)
    try:
        with deadline:
            async with Client(transport, cache=None, read_timeout_seconds=timeout_s) as client:
                deadline.deadline = math.inf
                connected = True
                if log is not None and relay is not None:
                    log.relay(relay)
                yield ReferenceHost(client, signer, binding)
        if log is not None and relay is not None and connected:
            log.relay(relay)
    except BaseException as exc:
        failure = explain(exc, server, connected=connected, timeout_s=timeout_s, log=log)
        if failure is None:
            raise
        raise failure from None
    finally:
        if log is not None:
            log.close()
    if not connected:
        where = describe(server)
        raise CannotConnect(f"no answer from {where} within {timeout_s:g} s — {_SLOW_HINT}")
