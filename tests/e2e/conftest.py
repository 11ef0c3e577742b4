"""End-to-end harness: the real server process, the real MCP SDK client, real OPA and DuckDB.

Every scenario runs against four deployments: {stdio, streamable HTTP} x {embedded Wasm
engine, real `opa run --server`}. Nothing here mocks OPA, DuckDB or the transport.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import StdioServerParameters

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import Binding, ReferenceHost, connect
from engram_memory.host.keys import HostSigningKey
from engram_memory.policy.authoring.default_bundle import default_bundle_dir
from engram_memory.policy.opa_server import start_opa_server
from tests.servers import http_server, server_env

ALICE = Binding(
    tenant="acme",
    workspace="support",
    principal="user:alice",
    purpose_ref="purpose:support-case",
)
CAROL = Binding(
    tenant="globex",
    workspace="main",
    principal="user:carol",
    purpose_ref="purpose:support-case",
)


@dataclass(frozen=True)
class Deployment:
    transport: str
    engine: str
    data_dir: Path
    env: dict[str, str]
    signer: HostSigningKey
    url: str | None = None
    process: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        """Stop the HTTP server so the store file can be inspected (stdio servers exit with
        their client)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)

    @asynccontextmanager
    async def host(
        self, binding: Binding = ALICE, mode: str = "auto"
    ) -> AsyncIterator[ReferenceHost]:
        server: StdioServerParameters | str
        if self.url is not None:
            server = self.url
        else:
            server = StdioServerParameters(
                command=sys.executable,
                args=["-m", "engram_memory.cli", "serve", "--transport", "stdio"],
                env=self.env,
            )
        async with connect(server, self.signer, binding, mode=mode) as host:
            yield host


@pytest.fixture(scope="session")
def host_secrets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return init_host_dir(tmp_path_factory.mktemp("secrets"))


@pytest.fixture(scope="session")
def opa_url() -> Iterator[str]:
    """A real OPA server on 127.0.0.1 serving the shipped bundle."""
    with start_opa_server(default_bundle_dir() / "bundle.tar.gz") as url:
        yield url


@pytest.fixture(params=["stdio-embedded", "http-embedded", "stdio-opa", "http-opa"])
def deployment(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    host_secrets: tuple[Path, Path, Path],
) -> Iterator[Deployment]:
    transport, engine = str(request.param).split("-")
    root_key, signing_key, public_keys = host_secrets
    data_dir = tmp_path / "data"
    env = server_env(data_dir, root_key, public_keys)
    if engine == "opa":
        env["ENGRAM_POLICY"] = request.getfixturevalue("opa_url")
    signer = HostSigningKey.from_pem_file(signing_key)
    if transport == "stdio":
        yield Deployment(transport, engine, data_dir, env, signer)
        return
    with http_server(env) as (process, url):
        yield Deployment(transport, engine, data_dir, env, signer, url, process)
