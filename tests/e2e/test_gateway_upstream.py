"""The gateway's two upstream kinds and what it does when the upstream fails.

A running `serve --transport http` behind a URL; a stdio child that dies mid-call (a
failpoint SIGKILLs it right after a commit) and is restarted on the next call; a URL where
nothing listens.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import mcp_types as types
import pytest
from mcp import MCPError
from mcp.client.session import ClientRequestContext

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.errors import ErrorCode
from engram_memory.core.failpoints import ENV_VAR
from engram_memory.store.connection import DATABASE_FILE
from tests.e2e.gateway_support import (
    GATEWAY,
    PURPOSE,
    code,
    envelope,
    forget_arguments,
    gateway_client,
    get,
    key,
    os_user,
    remembered,
    value,
    write_setup,
)
from tests.servers import free_port, http_server

pytestmark = pytest.mark.e2e

Secrets = tuple[Path, Path, Path]
CAPTURE = "engram_memory_capture"


async def _accept(
    _ctx: ClientRequestContext, _params: types.ElicitRequestParams
) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"confirm": True})


async def test_a_running_http_server_serves_as_the_upstream(
    tmp_path: Path, host_secrets: Secrets
) -> None:
    stdio_setup = write_setup(tmp_path / "env", host_secrets)
    with http_server(stdio_setup.env) as (process, url):
        setup = write_setup(tmp_path, host_secrets, upstream_url=url)
        async with gateway_client(setup, mode="auto", elicit=_accept) as client:
            record_id = await remembered(client, "Courier refund for parcel 5521.")
            found = value(
                await client.call_tool(
                    "engram_memory_search", {"query": "parcel 5521", "purpose_ref": PURPOSE}
                )
            )
            assert [hit["record"]["record_id"] for hit in found["records"]] == [record_id]
            forgotten = value(
                await client.call_tool("engram_memory_forget", forget_arguments(record_id))
            )
            assert forgotten["receipt"]["to_state"] == "tombstoned"
        process.terminate()
        process.wait(timeout=20)
    # The HTTP server's store, read once it stopped: the human's yes reached its audit.
    assert ("engram_memory_forget", "ok", f"human:{os_user()}") in stdio_setup.upstream_audit()


async def test_a_child_killed_after_commit_is_unknown_then_restarted_and_the_retry_replays(
    tmp_path: Path, host_secrets: Secrets
) -> None:
    failpoint = {ENV_VAR: f"kill_after_commit:{CAPTURE}"}
    setup = write_setup(tmp_path, host_secrets, upstream_env=failpoint)
    arguments = demo_capture_arguments("Committed, then the answer was lost.", key("cap"))
    async with gateway_client(setup) as client:
        lost = envelope(await client.call_tool(CAPTURE, arguments))
        assert lost["error"]["code"] == "MUTATION_OUTCOME_UNKNOWN"
        assert lost["error"]["retriable"] is True
        retried = value(await client.call_tool(CAPTURE, arguments))
        assert retried["status"] == "duplicate_exact"
    events = [(e["event"], e["reason"]) for e in setup.gateway_audit()]
    assert events == [
        ("upstream_unavailable", "connection_lost"),
        ("upstream_restarted", "connection_lost"),
    ]
    assert setup.gateway_audit()[0]["audit_id"] == lost["auditId"]


async def test_an_unreachable_upstream_is_store_unavailable_and_nothing_else(
    tmp_path: Path, host_secrets: Secrets
) -> None:
    setup = write_setup(tmp_path, host_secrets, upstream_url=f"http://127.0.0.1:{free_port()}/mcp")
    async with gateway_client(setup, elicit=_accept) as client:
        with pytest.raises(MCPError) as caught:
            await client.list_tools()
        # Retriable (JSON-RPC's server error range), with the contract's constant message.
        assert (caught.value.error.code, caught.value.error.message) == (
            -32000,
            ErrorCode.STORE_UNAVAILABLE.message,
        )
        for tool, arguments in (
            (CAPTURE, demo_capture_arguments("Never stored.", key("cap"))),
            ("engram_memory_forget", forget_arguments("mem_" + "a" * 52)),
        ):
            refused = envelope(await client.call_tool(tool, arguments))
            assert (refused["error"]["code"], refused["error"]["retriable"]) == (
                "STORE_UNAVAILABLE",
                True,
            )
        assert code(await get(client, "mem_" + "a" * 52)) == "STORE_UNAVAILABLE"
    reasons = [(e["event"], e["reason"]) for e in setup.gateway_audit()]
    assert ("upstream_unavailable", "connect_failed") in reasons


def _wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll `condition` until it holds or `seconds` pass (a bounded wait, not a sleep)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _children(pid: int) -> list[int]:
    listed = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(child) for child in listed.stdout.split()]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_stop_signal_ends_the_gateway_at_once_and_its_child_stops(
    tmp_path: Path, host_secrets: Secrets, stop: signal.Signals
) -> None:
    setup = write_setup(tmp_path, host_secrets)
    gateway = subprocess.Popen(
        [*GATEWAY, "--config", str(setup.config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The child is started at once (before any client request) and opens its store.
        assert _wait_until(lambda: (setup.data_dir / DATABASE_FILE).exists(), 60)
        children = _children(gateway.pid)
        assert len(children) == 1
        gateway.send_signal(stop)
        assert gateway.wait(timeout=20) == -stop
        child = Path(f"/proc/{children[0]}")
        assert _wait_until(lambda: not child.exists(), 30)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
