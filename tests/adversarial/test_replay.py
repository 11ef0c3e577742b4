"""A captured invocation token replayed as an attacker would: on the same connection, on
another one, concurrently, and on another transport after a restart. Each replay is
-32603, audited in the host stream as a replay with the token's digest; the original call
stands and a legitimate client keeps being served."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from engram_memory.client.reference_host import ReferenceHost
from engram_memory.host.context import INVOCATION_META_KEY
from tests.adversarial.refusal_support import SEARCH, SEARCH_ARGS, Store

TRANSPORTS = ["stdio", "http"]


@asynccontextmanager
async def _another(
    store: Store, server: object, transport: str, first: ReferenceHost
) -> AsyncIterator[ReferenceHost]:
    if transport == "stdio":
        yield first
        return
    async with store.host(server) as host:  # type: ignore[arg-type]
        yield host


def _digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


async def _refused_code(call: object) -> int:
    with pytest.raises(MCPError) as refused:
        await call  # type: ignore[misc]
    return refused.value.code


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_replay_on_the_same_and_another_connection_is_refused_and_audited(
    tmp_path: Path, transport: str
) -> None:
    store = Store.create(tmp_path)
    with store.serving(transport) as server:
        async with store.host(server) as victim:
            meta = victim.invocation_meta()
            token = meta[INVOCATION_META_KEY]
            original = await victim.call(SEARCH, SEARCH_ARGS, meta=meta)
            assert original.envelope["ok"] is True
            assert await _refused_code(victim.call(SEARCH, SEARCH_ARGS, meta=meta)) == -32603
            assert (await victim.call(SEARCH, SEARCH_ARGS)).envelope["ok"] is True
        # Another connection (over stdio: another server process on the same store).
        async with store.host(server) as attacker:
            assert await _refused_code(attacker.call(SEARCH, SEARCH_ARGS, meta=meta)) == -32603
            assert (await attacker.call(SEARCH, SEARCH_ARGS)).envelope["ok"] is True
    replays = [e for e in store.host_entries() if e["reason"] == "token_replayed"]
    assert [(e["token_digest"], e["tool"], e["transport"]) for e in replays] == [
        (_digest(token), SEARCH, transport)
    ] * 2
    assert all(e["audit_id"].startswith("host:") for e in replays)
    audit_id = original.envelope["auditId"]
    assert store.count("audit_id = ?", [audit_id]) == 1


async def test_a_token_spent_over_stdio_is_refused_over_http_after_a_restart(
    tmp_path: Path,
) -> None:
    store = Store.create(tmp_path)
    with store.serving("stdio") as server:
        async with store.host(server) as host:
            meta = host.invocation_meta()
            assert (await host.call(SEARCH, SEARCH_ARGS, meta=meta)).envelope["ok"] is True
    with store.serving("http") as server:
        async with store.host(server) as attacker:
            assert await _refused_code(attacker.call(SEARCH, SEARCH_ARGS, meta=meta)) == -32603
            assert (await attacker.call(SEARCH, SEARCH_ARGS)).envelope["ok"] is True
    (replay,) = store.host_entries()
    assert (replay["reason"], replay["transport"]) == ("token_replayed", "http")
    assert replay["peer"] == "127.0.0.1"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_of_concurrent_replays_on_several_connections_exactly_one_is_served(
    tmp_path: Path, transport: str
) -> None:
    store = Store.create(tmp_path)
    outcomes: list[str] = []
    with store.serving(transport) as server:
        # Over stdio one process serves one connection: the race runs on that connection.
        async with (
            store.host(server) as first,
            _another(store, server, transport, first) as second,
            _another(store, server, transport, first) as third,
        ):
            meta = first.invocation_meta()

            async def attempt(host: ReferenceHost) -> None:
                try:
                    outcome = await host.call(SEARCH, SEARCH_ARGS, meta=meta)
                except MCPError as refused:
                    outcomes.append(f"rpc:{refused.code}")
                else:
                    outcomes.append("ok" if outcome.envelope["ok"] else "error")

            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:
                    for host in (first, second, third, first, second, third):
                        group.start_soon(attempt, host)
    assert sorted(outcomes) == ["ok"] + ["rpc:-32603"] * 5
    entries = store.host_entries()
    if transport == "http":
        entries = entries
    assert [e["reason"] for e in entries] == ["token_replayed"] * 5
