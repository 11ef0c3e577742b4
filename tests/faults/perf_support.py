"""Shared by the perf fault tests: one real HTTP server, many SDK clients racing one call."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import BINDING
from engram_memory.client.reference_host import CallOutcome, ReferenceHost, connect
from engram_memory.host.keys import HostSigningKey
from tests.servers import http_server, server_env

APPROVER = "human:race-operator"
CLIENTS = 16


@dataclass(frozen=True)
class LiveServer:
    url: str
    signer: HostSigningKey
    data_dir: Path


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """`serve --transport http` on a fresh store, embedded engine, for one test module."""
    workdir = tmp_path_factory.mktemp("perf-server")
    root_key, signing_key, public_keys = init_host_dir(workdir / "secrets")
    env = server_env(workdir / "data", root_key, public_keys)
    with http_server(env) as (_process, url):
        yield LiveServer(url, HostSigningKey.from_pem_file(signing_key), workdir / "data")


def fresh_key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


def value_of(outcome: CallOutcome) -> dict[str, Any]:
    assert outcome.envelope.get("ok") is True, outcome.envelope.get("error")
    value: dict[str, Any] = outcome.envelope["output"]["value"]
    return value


def code_of(outcome: CallOutcome) -> str | None:
    """The error code, or None for a success."""
    if outcome.envelope.get("ok"):
        return None
    code: str = outcome.envelope["error"]["code"]
    return code


class Clients:
    """`CLIENTS` independent MCP sessions to one server, each its own HTTP connection."""

    def __init__(self, server: LiveServer, count: int = CLIENTS) -> None:
        self._server = server
        self._count = count
        self._stack = AsyncExitStack()
        self.hosts: list[ReferenceHost] = []

    async def __aenter__(self) -> Clients:
        for _ in range(self._count):
            self.hosts.append(
                await self._stack.enter_async_context(
                    connect(self._server.url, self._server.signer, BINDING)
                )
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def race(
        self,
        tool: str,
        arguments: dict[str, Any],
        confirm_target: str | None = None,
    ) -> list[CallOutcome]:
        """Every client sends the same call at once (each with its own fresh context and,
        for confirmed tools, its own confirmation, as a host retrying would)."""
        start = anyio.Event()
        outcomes: list[CallOutcome | None] = [None] * len(self.hosts)

        def call_for(index: int, host: ReferenceHost) -> Callable[[], Any]:
            token = (
                None
                if confirm_target is None
                else host.confirmation_for(tool, arguments, confirm_target, APPROVER)
            )

            async def run() -> None:
                await start.wait()
                outcomes[index] = await host.call(tool, arguments, confirmation=token)

            return run

        async with anyio.create_task_group() as group:
            for index, host in enumerate(self.hosts):
                group.start_soon(call_for(index, host))
            start.set()
        return [outcome for outcome in outcomes if outcome is not None]
