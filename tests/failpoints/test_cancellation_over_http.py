"""Cancellation through the real server process over streamable HTTP and the MCP SDK client.

The server is started with `pause_before_commit` armed for capture, so the call waits at its
last check before commit; the test reads the server's log until the pause is announced,
then cancels the call the way an MCP client does (the SDK sends `notifications/cancelled`).
The server logs that the paused call resumed because it was cancelled; the capture must not
commit: the retry with the same key is a first use, and the store file holds one capture.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import IO

import anyio
import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import connect
from engram_memory.core.failpoints import ENV_VAR, PAUSE_BEFORE_COMMIT
from engram_memory.host.keys import HostSigningKey
from tests.failpoints.test_over_stdio import ALICE, CAPTURE, _journal, _key, _value
from tests.servers import http_server, server_env

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("timing")]


def _read_until(stream: IO[bytes], marker: bytes) -> bytes:
    for line in stream:
        if marker in line:
            return line
    raise AssertionError("the server exited before logging the failpoint")


async def test_a_capture_cancelled_by_the_mcp_client_before_commit_commits_nothing(
    tmp_path: Path,
) -> None:
    root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
    data_dir = tmp_path / "data"
    env = server_env(
        data_dir, root_key, public_keys, **{ENV_VAR: f"{PAUSE_BEFORE_COMMIT}:{CAPTURE}"}
    )
    arguments = demo_capture_arguments("Cancelled by the client.", _key("capture"))
    signer = HostSigningKey.from_pem_file(signing_key)
    with http_server(env, stderr=subprocess.PIPE) as (process, url):
        assert process.stderr is not None
        async with connect(url, signer, ALICE) as host:
            answered = []
            async with anyio.create_task_group() as group:

                async def first_call() -> None:
                    answered.append(await host.call(CAPTURE, arguments))

                group.start_soon(first_call)
                await anyio.to_thread.run_sync(
                    _read_until, process.stderr, b"paused until cancelled"
                )
                group.cancel_scope.cancel()
            assert answered == []  # a cancelled request gets no response
            # The paused worker woke because the cancellation reached it (not the time limit).
            resumed = await anyio.to_thread.run_sync(_read_until, process.stderr, b"resumed")
            assert resumed.rstrip().endswith(b"cancelled=True")
            retried = _value(await host.call(CAPTURE, arguments))
            assert retried["status"] == "committed_pending"
    journal = _journal(data_dir)
    assert journal == [("capture", retried["cursor"], retried["candidate_id"])]
