"""Servers for the replay and refusal-audit attacks: one store, served over stdio or
streamable HTTP by the real `serve` process, and read back once the server has stopped."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import Binding, ReferenceHost, connect
from engram_memory.host.keys import HostSigningKey
from engram_memory.store.database import Database
from tests.servers import http_server, server_env

ALICE = Binding(
    tenant="acme",
    workspace="support",
    principal="user:alice",
    purpose_ref="purpose:support-case",
)
SEARCH = "engram_memory_search"
SEARCH_ARGS: dict[str, Any] = {"query": "anything", "purpose_ref": ALICE.purpose_ref}
HOST_COLUMNS = "reason, tool, transport, peer, token_digest, occurrences, audit_id"


def host_entries(data_dir: Path) -> list[dict[str, Any]]:
    """The host-stream entries of the store in `data_dir`, in order, as an auditor reads them
    once no server holds the store."""
    database = Database.open(data_dir)
    try:
        with database.reading() as tx:
            rows = tx.fetchall(
                f"SELECT {HOST_COLUMNS} FROM audit_entries"  # noqa: S608 - constant columns
                " WHERE scope_ref = 'host' ORDER BY sequence"
            )
    finally:
        database.close()
    names = [name.strip() for name in HOST_COLUMNS.split(",")]
    return [dict(zip(names, row, strict=True)) for row in rows]


def refused_count(entries: list[dict[str, Any]], **match: object) -> int:
    """How many refusals the `entries` matching every `column=value` in `match` stand for:
    individual entries plus the counts of summaries (`occurrences`)."""
    return sum(
        int(entry["occurrences"])
        for entry in entries
        if all(entry[column] == value for column, value in match.items())
    )


def bound_refusals(data_dir: Path, outcome: str, tool: str) -> tuple[int, int]:
    """(entries, refusals) of tenant-scoped entries with `outcome` for `tool` in the stopped
    server's store: how many rows, and how many refusals they stand for (summaries count
    several in `occurrences`)."""
    database = Database.open(data_dir)
    try:
        with database.reading() as tx:
            row = tx.fetchone(
                "SELECT count(*), coalesce(sum(occurrences), 0) FROM audit_entries"
                " WHERE scope_ref <> 'host' AND outcome = ? AND tool = ?",
                [outcome, tool],
            )
    finally:
        database.close()
    assert row is not None
    return int(row[0]), int(row[1])


@dataclass(frozen=True)
class Store:
    """A data directory with its keys; servers are started on it one at a time."""

    data_dir: Path
    env: dict[str, str]
    signer: HostSigningKey

    @classmethod
    def create(cls, tmp_path: Path, **extra_env: str) -> Store:
        root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
        data_dir = tmp_path / "data"
        env = server_env(data_dir, root_key, public_keys, **extra_env)
        return cls(data_dir, env, HostSigningKey.from_pem_file(signing_key))

    @contextmanager
    def serving(self, transport: str) -> Iterator[StdioServerParameters | str]:
        """What `connect` needs to reach a server on this store over `transport`; an HTTP
        server is stopped (SIGTERM, graceful) when the block ends, a stdio one exits with
        its last client."""
        if transport == "stdio":
            yield StdioServerParameters(
                command=sys.executable,
                args=["-m", "engram_memory.cli", "serve", "--transport", "stdio"],
                env=self.env,
            )
            return
        with http_server(self.env) as (_process, url):
            yield url

    @asynccontextmanager
    async def host(
        self, server: StdioServerParameters | str, binding: Binding = ALICE
    ) -> AsyncIterator[ReferenceHost]:
        async with connect(server, self.signer, binding) as host:
            yield host

    def host_entries(self) -> list[dict[str, Any]]:
        """The host-stream entries, in order (read once no server holds the store)."""
        return host_entries(self.data_dir)

    def count(self, where: str, params: list[object]) -> int:
        database = Database.open(self.data_dir)
        try:
            with database.reading() as tx:
                row = tx.fetchone(f"SELECT count(*) FROM audit_entries WHERE {where}", params)  # noqa: S608
        finally:
            database.close()
        assert row is not None
        return int(row[0])
