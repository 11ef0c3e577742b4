"""Refusals before binding leave a trace, and a storm of them a bounded one: forged, missing
and replayed tokens and unknown tools are audited in the host-level stream (reason, peer,
transport, token digest), and 500 bad calls grow the trail by `burst + 1` entries whose
counts add up to exactly 500, while a legitimate client is served throughout."""

from __future__ import annotations

import hashlib
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from engram_memory.client.reference_host import ReferenceHost
from engram_memory.host.context import INVOCATION_META_KEY
from engram_memory.host.keys import HostSigningKey
from tests.adversarial.refusal_support import SEARCH, SEARCH_ARGS, Store

TRANSPORTS = ["stdio", "http"]
BURST = 5
STORM = 500
CONCURRENT = 25  # calls in flight at once during the storm


def _peer(transport: str) -> str:
    return "stdio" if transport == "stdio" else "127.0.0.1"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_forged_missing_and_unknown_tool_refusals_leave_host_stream_entries(
    tmp_path: Path, transport: str
) -> None:
    store = Store.create(tmp_path)
    with store.serving(transport) as server:
        async with store.host(server) as host:
            forger = ReferenceHost(host.client, HostSigningKey.generate(), host.binding)
            forged_meta = forger.invocation_meta()
            with pytest.raises(MCPError) as forged:
                await host.call(SEARCH, SEARCH_ARGS, meta=forged_meta)
            with pytest.raises(MCPError) as missing:
                await host.call(SEARCH, SEARCH_ARGS, meta={})
            with pytest.raises(MCPError) as unknown:
                await host.call("engram_memory_drop_everything", SEARCH_ARGS)
            assert [forged.value.code, missing.value.code, unknown.value.code] == [
                -32603,
                -32603,
                -32602,
            ]
            assert (await host.call(SEARCH, SEARCH_ARGS)).envelope["ok"] is True
    forged_digest = hashlib.sha256(forged_meta[INVOCATION_META_KEY].encode()).hexdigest()
    entries = store.host_entries()
    assert [(e["reason"], e["tool"]) for e in entries] == [
        ("token_invalid", SEARCH),
        ("token_missing", SEARCH),
        ("unknown_tool", "tools/call"),
    ]
    assert entries[0]["token_digest"] == "sha256:" + forged_digest
    assert entries[1]["token_digest"] == ""
    assert entries[2]["token_digest"] != ""  # the host's genuine token came with it
    assert {(e["transport"], e["peer"], e["occurrences"]) for e in entries} == {
        (transport, _peer(transport), 1)
    }


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_storm_of_forged_calls_grows_the_trail_by_a_bounded_exact_amount(
    tmp_path: Path, transport: str
) -> None:
    store = Store.create(tmp_path, ENGRAM_REFUSAL_BURST=str(BURST))
    refused: list[int] = []
    served: list[bool] = []
    with store.serving(transport) as server:
        async with store.host(server) as host:
            forger = ReferenceHost(host.client, HostSigningKey.generate(), host.binding)

            async def attack() -> None:
                try:
                    await forger.call(SEARCH, SEARCH_ARGS)
                except MCPError as refusal:
                    refused.append(refusal.code)

            with anyio.fail_after(120):
                for wave in range(STORM // CONCURRENT):
                    async with anyio.create_task_group() as group:
                        for _ in range(CONCURRENT):
                            group.start_soon(attack)
                        if wave % 5 == 0:  # a legitimate call in the middle of the storm
                            served.append((await host.call(SEARCH, SEARCH_ARGS)).envelope["ok"])
    assert refused == [-32603] * STORM
    assert served == [True] * (STORM // CONCURRENT // 5)
    entries = store.host_entries()
    # The bound: `burst` entries, then one summary written at the latest when the server stops.
    assert len(entries) == BURST + 1
    assert [e["occurrences"] for e in entries] == [1] * BURST + [STORM - BURST]
    assert {(e["reason"], e["peer"]) for e in entries} == {("token_invalid", _peer(transport))}
    assert store.count("scope_ref <> 'host' AND outcome = 'ok'", []) == len(served)
