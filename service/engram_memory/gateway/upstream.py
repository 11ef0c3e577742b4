"""The engram-memory server behind the gateway, reached with the MCP SDK's client.

Either a child process over stdio (`upstream.command`, started with exactly the configured
environment plus PATH and HOME, so nothing else of the gateway's environment reaches the
store) or a running server over streamable HTTP (`upstream.url`). One SDK session carries
every request; the SDK's dispatcher matches answers to requests, so calls run concurrently.

Requests go out raw through the session (as reference_host.py does): the SDK's client-side
output validation would otherwise re-list tools without an invocation context.

A child that died (or an HTTP session that closed) is reconnected lazily, on the next call,
and the reconnection is reported through `on_reconnect` (the gateway audits it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Self

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from engram_memory.gateway.config import UpstreamConfig

log = logging.getLogger("engram_memory.gateway")

_CONNECTION_CLOSED = (types.CONNECTION_CLOSED, "Connection closed")


class UpstreamUnavailable(Exception):
    """The upstream did not answer. `sent` is True when the request may have reached it
    (a mutation's outcome is then unknown), False when it certainly did not."""

    def __init__(self, sent: bool, reason: str) -> None:
        super().__init__(reason)
        self.sent = sent
        self.reason = reason


@dataclass
class _Connection:
    """One SDK client session, held open by its own task until `stop` is set."""

    client: Client | None = None
    error: BaseException | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)

    def closed(self) -> bool:
        if self.client is None:
            return True
        # The SDK marks its dispatcher closed when the transport reached EOF (the child
        # exited, the HTTP session ended); it has no public accessor for that.
        dispatcher = getattr(self.client.session, "_dispatcher", None)
        return bool(getattr(dispatcher, "_closed", False))


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The child's whole environment: the configured variables plus PATH and HOME (unless
    the configuration sets them)."""
    base = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
    return {**base, **env}


class Upstream:
    """An async context manager over the SDK `Client` (see the module docstring)."""

    def __init__(
        self,
        config: UpstreamConfig,
        on_reconnect: Callable[[str], None] | None = None,
    ) -> None:
        self._config = config
        self._timeout = config.timeout_s
        self._on_reconnect = on_reconnect
        self._connection: _Connection | None = None
        self._lock = anyio.Lock()
        self._stack: AsyncExitStack | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._connections_made = 0

    def _server(self) -> StdioServerParameters | str:
        if self._config.url is not None:
            return self._config.url
        assert self._config.command is not None
        program, *args = self._config.command
        return StdioServerParameters(
            command=program, args=args, env=child_environment(self._config.env)
        )

    async def __aenter__(self) -> Self:
        stack = AsyncExitStack()
        self._group = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._connection is not None:
            self._connection.stop.set()
        assert self._stack is not None
        await self._stack.aclose()

    async def _hold(self, connection: _Connection) -> None:
        try:
            async with Client(self._server(), mode="auto", cache=None) as client:
                connection.client = client
                connection.ready.set()
                await connection.stop.wait()
        except Exception as exc:  # noqa: BLE001 - any failure to connect is "unavailable"
            connection.error = exc
        finally:
            connection.ready.set()

    async def connect(self) -> None:
        """Connect now (the CLI does so at start, so a wrong command fails at once).

        Raises:
            UpstreamUnavailable: the child cannot be started or the URL does not answer.
        """
        await self._session()

    async def _session(self) -> Client:
        """The live client session, (re)connecting if there is none.

        Raises:
            UpstreamUnavailable: (sent=False) no session could be established.
        """
        current = self._connection
        if current is not None and not current.closed():
            assert current.client is not None
            return current.client
        async with self._lock:
            current = self._connection
            if current is not None and not current.closed():
                assert current.client is not None
                return current.client
            if current is not None:
                current.stop.set()
            assert self._group is not None, "Upstream used outside `async with`"
            connection = _Connection()
            self._group.start_soon(self._hold, connection)
            with anyio.move_on_after(self._timeout):
                await connection.ready.wait()
            if connection.client is None:
                connection.stop.set()
                # The class only: a message could carry a URL's credentials or a path.
                reason = type(connection.error).__name__ if connection.error else "timeout"
                log.warning("upstream cannot be reached (%s)", reason)
                raise UpstreamUnavailable(False, "connect_failed")
            self._connection = connection
            self._connections_made += 1
            if self._connections_made > 1 and self._on_reconnect is not None:
                self._on_reconnect("connection_lost")
            return connection.client

    async def _send(self, request: types.ClientRequest, result_type: type[Any]) -> Any:
        client = await self._session()
        try:
            return await client.session.send_request(
                request, result_type, request_read_timeout_seconds=self._timeout
            )
        except MCPError as error:
            if (error.error.code, error.error.message) == _CONNECTION_CLOSED:
                raise UpstreamUnavailable(True, "connection_lost") from None
            if error.error.code == types.REQUEST_TIMEOUT:
                raise UpstreamUnavailable(True, "timed_out") from None
            raise
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise UpstreamUnavailable(True, "connection_lost") from None

    async def list_tools(self, meta: Mapping[str, Any]) -> types.ListToolsResult:
        """The upstream's `tools/list` under `meta` (an invocation context).

        Raises:
            UpstreamUnavailable: the upstream did not answer.
            MCPError: the upstream's own JSON-RPC refusal, code and message unchanged.
        """
        request = types.ListToolsRequest(params=types.PaginatedRequestParams(_meta=dict(meta)))
        result: types.ListToolsResult = await self._send(request, types.ListToolsResult)
        return result

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any]
    ) -> types.CallToolResult:
        """The upstream's `tools/call`, arguments as received, under `meta`.

        Raises:
            UpstreamUnavailable: the upstream did not answer.
            MCPError: the upstream's own JSON-RPC refusal, code and message unchanged.
        """
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name=name,
                arguments=None if arguments is None else dict(arguments),
                _meta=dict(meta),
            )
        )
        result: types.CallToolResult = await self._send(request, types.CallToolResult)
        return result
