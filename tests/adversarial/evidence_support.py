"""The real server for the evidence attacks (issue 9 items 4 and 7): a deployment on stdio or
streamable HTTP with the embedded engine, a reference host bound to it, and read-only looks
at the store once the server has stopped."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from mcp import StdioServerParameters

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import Binding, CallOutcome, ReferenceHost, connect
from engram_memory.host.keys import HostSigningKey
from engram_memory.store.connection import DATABASE_FILE
from tests.cli_runner import run_cli
from tests.servers import http_server, server_env

ALICE = Binding(
    tenant="acme", workspace="support", principal="user:alice", purpose_ref="purpose:support-case"
)
SCOPE = "tenant:acme/workspace:support"


@dataclass
class Server:
    """One real server process (HTTP) or the recipe for one (stdio: spawned per client)."""

    data_dir: Path
    env: dict[str, str]
    signer: HostSigningKey
    url: str | None = None
    process: subprocess.Popen[bytes] | None = None

    @asynccontextmanager
    async def host(self) -> AsyncIterator[ReferenceHost]:
        server: StdioServerParameters | str
        if self.url is not None:
            server = self.url
        else:
            command = ["-m", "engram_memory.cli", "serve", "--transport", "stdio"]
            server = StdioServerParameters(command=sys.executable, args=command, env=self.env)
        async with connect(server, self.signer, ALICE) as host:
            yield host

    def stop(self) -> None:
        """Stop an HTTP server so its files can be read (a stdio server exits with its client)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)

    def audit_verify(self) -> subprocess.CompletedProcess[str]:
        """`engram-memory audit verify` (the CLI's `main(argv)`, in this process: its exit code
        and output are what is checked) on the stopped server's store."""
        return run_cli(self.env, "audit", "verify", "--data-dir", str(self.data_dir))

    def rows(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        """Rows of the stopped server's store, opened read-only as anyone with the file could."""
        with duckdb.connect(str(self.data_dir / DATABASE_FILE), read_only=True) as con:
            return con.execute(sql, params or []).fetchall()


@contextmanager
def real_server(transport: str, tmp_path: Path) -> Iterator[Server]:
    root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
    data_dir = tmp_path / "data"
    env = server_env(data_dir, root_key, public_keys)
    signer = HostSigningKey.from_pem_file(signing_key)
    if transport == "stdio":
        yield Server(data_dir, env, signer)
        return
    with http_server(env) as (process, url):
        server = Server(data_dir, env, signer, url, process)
        yield server
        server.stop()


def key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


def value(outcome: CallOutcome) -> dict[str, Any]:
    assert outcome.envelope["ok"] is True, outcome.envelope
    result: dict[str, Any] = outcome.envelope["output"]["value"]
    return result


def code(outcome: CallOutcome) -> str:
    assert outcome.envelope["ok"] is False, outcome.envelope
    error: str = outcome.envelope["error"]["code"]
    return error


async def captured(host: ReferenceHost, text: str) -> dict[str, Any]:
    args = demo_capture_arguments(text, key("cap"))
    return value(await host.call("engram_memory_capture", args))


async def accepted(host: ReferenceHost, text: str) -> str:
    """A record accepted by policy admission; returns its id."""
    candidate_id = (await captured(host, text))["candidate_id"]
    args = {"candidate_id": candidate_id, "idempotency_key": key("adm")}
    outcome = value(await host.call("engram_memory_request_admission", args))["outcome"]
    assert outcome["status"] == "accepted", outcome
    record_id: str = outcome["record_id"]
    return record_id


def forget_args(record_id: str) -> dict[str, Any]:
    return {"record_id": record_id, "idempotency_key": key("fgt"), "reason_ref": "reason:request"}
