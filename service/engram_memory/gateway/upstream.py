"""The engram-memory server behind the gateway, reached with the MCP SDK's client.

Either a child process over stdio (`upstream.command`, started with exactly the configured
environment plus PATH and HOME, so nothing else of the gateway's environment reaches the
store) or a running server over streamable HTTP (`upstream.url`). One SDK session carries
every request; answers are matched to requests by id, so calls run concurrently. A child is
spoken to through `channel.StdioChannel`, JSON lines on its pipes (the SDK's client costs
about 1 ms of CPU per call, the gateway's whole budget: channel.py), an HTTP upstream
through the SDK's `Client`.

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

from engram_memory.contract.exceptions import UpstreamUnavailable
from engram_memory.gateway.channel import StdioChannel, child_channel
from engram_memory.gateway.config import UpstreamConfig, resolve_program

log = logging.getLogger("engram_memory.gateway")

_CONNECTION_CLOSED = (types.CONNECTION_CLOSED, "Connection closed")


@dataclass(eq=False)  # held in a set, by identity
class _Connection:
    """One session (a child's channel or an SDK client), held open by its own task until
    `stop` is set."""

    client: Client | None = None
    channel: StdioChannel | None = None
    error: BaseException | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    # Cancelled when the gateway stops while this connection is still being made.
    making: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def open(self) -> bool:
        return self.client is not None or self.channel is not None

    def closed(self) -> bool:
        if self.channel is not None:
            return self.channel.closed
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
        # Every connection whose task still runs, the one being made included: a stop
        # must reach it even when nobody waits for it any more.
        self._held: set[_Connection] = set()

    def _server(self) -> StdioServerParameters | str:
        if self._config.url is not None:
            return self._config.url
        assert self._config.command is not None
        program, *args = self._config.command
        # As `--check` found it (config.resolve_program); the name as given if it has gone.
        resolved = resolve_program(program, self._config.env) or program
        return StdioServerParameters(
            command=resolved, args=args, env=child_environment(self._config.env)
        )

    async def __aenter__(self) -> Self:
        stack = AsyncExitStack()
        self._group = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        # Not only the current connection: one still being made (the client left while the
        # child started, and the call that wanted it was cancelled) would otherwise come up
        # later, wait for a stop nobody sends, and hold this exit forever.
        for connection in list(self._held):
            connection.stop.set()
            if not connection.ready.is_set():
                connection.making.cancel()  # its child is stopped on the way out
        assert self._stack is not None
        await self._stack.aclose()

    async def _hold(self, connection: _Connection) -> None:
        try:
            with connection.making:
                await self._open_and_hold(connection)
        finally:
            self._held.discard(connection)
            connection.ready.set()

    async def _open_and_hold(self, connection: _Connection) -> None:
        try:
            server = self._server()
            if isinstance(server, str):
                async with Client(server, mode="auto", cache=None) as client:
                    connection.client = client
                    connection.ready.set()
                    await connection.stop.wait()
                return
            command = [server.command, *server.args]
            async with child_channel(command, server.env or {}, self._timeout) as channel:
                connection.channel = channel
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

    async def _session(self) -> _Connection:
        """The live session, (re)connecting if there is none.

        Raises:
            UpstreamUnavailable: (sent=False) no session could be established.
        """
        current = self._connection
        if current is not None and not current.closed():
            return current
        async with self._lock:
            current = self._connection
            if current is not None and not current.closed():
                return current
            if current is not None:
                current.stop.set()
            assert self._group is not None, "Upstream used outside `async with`"
            connection = _Connection()
            self._held.add(connection)
            self._group.start_soon(self._hold, connection)
            try:
                with anyio.move_on_after(self._timeout):
                    await connection.ready.wait()
            except BaseException:
                # Cancelled while it was being made: nobody will use it.
                connection.stop.set()
                connection.making.cancel()
                raise
            if not connection.open():
                connection.stop.set()
                # The class only: a message could carry a URL's credentials or a path.
                reason = type(connection.error).__name__ if connection.error else "timeout"
                log.warning("upstream cannot be reached (%s)", reason)
                raise UpstreamUnavailable(False, "connect_failed")
            self._connection = connection
            self._connections_made += 1
            if self._connections_made > 1 and self._on_reconnect is not None:
                self._on_reconnect("connection_lost")
            return connection

    async def _send(
        self,
        method: str,
        params: dict[str, Any],
        request: Callable[[], types.ClientRequest],
        result_type: type[Any] | None,
    ) -> Any:
        """`method` with the wire `params` (as the SDK model `request()` for an SDK client),
        answered as `result_type` (None: the result's JSON object, unvalidated)."""
        connection = await self._session()
        try:
            if connection.channel is not None:
                raw = await connection.channel.request(method, params, self._timeout)
                return (
                    raw if result_type is None else result_type.model_validate(raw, by_name=False)
                )
            assert connection.client is not None
            result = await connection.client.session.send_request(
                request(),
                result_type or types.CallToolResult,
                request_read_timeout_seconds=self._timeout,
            )
            if result_type is None:
                return result.model_dump(by_alias=True, mode="json", exclude_none=True)
            return result
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
        params = {"_meta": dict(meta)}

        def request() -> types.ClientRequest:
            return types.ListToolsRequest(params=types.PaginatedRequestParams(_meta=dict(meta)))

        result: types.ListToolsResult = await self._send(
            "tools/list", params, request, types.ListToolsResult
        )
        return result

    def child_version(self) -> str | None:
        """The handshake version of a live child's session; None for an HTTP upstream, or
        while there is no live child (the next call through `call_tool` reconnects)."""
        connection = self._connection
        if connection is None or connection.channel is None or connection.channel.closed:
            return None
        return connection.channel.protocol_version

    async def call_tool_json(
        self, name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any]
    ) -> dict[str, Any]:
        """As `call_tool`, the result as the child's JSON object, passed on unvalidated (the
        stdio fast path: fast.py).

        Raises:
            UpstreamUnavailable: the upstream did not answer.
            MCPError: the upstream's own JSON-RPC refusal, code and message unchanged.
        """
        params: dict[str, Any] = {"name": name, "_meta": dict(meta)}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        result: dict[str, Any] = await self._send(
            "tools/call", params, lambda: _call_request(name, arguments, meta), None
        )
        return result

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any]
    ) -> types.CallToolResult:
        """The upstream's `tools/call`, arguments as received, under `meta`.

        Raises:
            UpstreamUnavailable: the upstream did not answer.
            MCPError: the upstream's own JSON-RPC refusal, code and message unchanged.
        """
        params: dict[str, Any] = {"name": name, "_meta": dict(meta)}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        result: types.CallToolResult = await self._send(
            "tools/call", params, lambda: _call_request(name, arguments, meta), types.CallToolResult
        )
        return result


def _call_request(
    name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any]
) -> types.ClientRequest:
    return types.CallToolRequest(
        params=types.CallToolRequestParams(
            name=name, arguments=None if arguments is None else dict(arguments), _meta=dict(meta)
        )
    )
