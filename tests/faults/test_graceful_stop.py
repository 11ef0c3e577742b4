"""SIGTERM and SIGINT stop the real server gracefully, over streamable HTTP and stdio.

A capture is held at its last check before commit by the `pause_before_commit` failpoint
when the signal arrives; a graceful stop releases that pause, so the call must go on, commit
and answer before the process exits 0. After every stop: no traceback, no maintenance socket,
the WAL folded into the store file, and the next start serves (the capture replays).
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from pathlib import Path

import anyio
import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import CallOutcome, connect
from engram_memory.core.failpoints import ENV_VAR, PAUSE_BEFORE_COMMIT
from engram_memory.host.keys import HostSigningKey
from tests.faults.ops_support import (
    ALICE,
    CAPTURE,
    StdioServer,
    assert_closed_cleanly,
    environment_for_channel,
    invocation_meta,
    read_until,
)
from tests.servers import http_server, server_env

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("timing")]

EXIT_TIMEOUT_S = 30


def _setup(tmp_path: Path, **extra: str) -> tuple[dict[str, str], HostSigningKey, Path]:
    root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
    data_dir = tmp_path / "data"
    env = environment_for_channel(server_env(data_dir, root_key, public_keys, **extra))
    return env, HostSigningKey.from_pem_file(signing_key), data_dir


async def _capture_status(url: str, signer: HostSigningKey, arguments: dict[str, object]) -> str:
    async with connect(url, signer, ALICE) as host:
        outcome = await host.call(CAPTURE, arguments)
    assert outcome.envelope["ok"] is True, outcome.envelope
    return str(outcome.envelope["output"]["value"]["status"])


async def test_sigterm_over_http_lets_the_call_in_flight_commit_and_exits_zero(
    tmp_path: Path,
) -> None:
    env, signer, data_dir = _setup(tmp_path, **{ENV_VAR: f"{PAUSE_BEFORE_COMMIT}:{CAPTURE}"})
    arguments = demo_capture_arguments(
        "Held when the stop began.", f"graceful-http-{uuid.uuid4().hex}"
    )
    with http_server(env, stderr=subprocess.PIPE) as (process, url):
        assert process.stderr is not None
        answered: list[CallOutcome] = []
        async with connect(url, signer, ALICE) as host:
            async with anyio.create_task_group() as group:

                async def call_in_flight() -> None:
                    answered.append(await host.call(CAPTURE, arguments))

                group.start_soon(call_in_flight)
                await anyio.to_thread.run_sync(
                    read_until, process.stderr, b"paused until cancelled"
                )
                process.send_signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(lambda: process.wait(EXIT_TIMEOUT_S))
        stderr = process.stderr.read()
    assert code == 0, stderr.decode()
    assert len(answered) == 1
    assert answered[0].envelope["ok"] is True, answered[0].envelope
    assert answered[0].envelope["output"]["value"]["status"] == "committed_pending"
    assert b"cancelled=False" in stderr  # the stop released the pause; nothing cancelled it
    assert_closed_cleanly(data_dir, stderr)

    plain = {k: v for k, v in env.items() if k != ENV_VAR}
    with http_server(plain) as (_process, url):
        assert (
            await _capture_status(url, signer, arguments) == "duplicate_exact"
        )  # the committed capture, replayed


async def test_sigint_over_http_stops_an_idle_server_without_a_traceback(tmp_path: Path) -> None:
    env, signer, data_dir = _setup(tmp_path)
    arguments = demo_capture_arguments(
        "Written before the stop.", f"graceful-http-{uuid.uuid4().hex}"
    )
    with http_server(env, stderr=subprocess.PIPE) as (process, url):
        assert await _capture_status(url, signer, arguments) == "committed_pending"
        process.send_signal(signal.SIGINT)
        code = process.wait(EXIT_TIMEOUT_S)
        assert process.stderr is not None
        stderr = process.stderr.read()
    assert code == 0, stderr.decode()
    assert_closed_cleanly(data_dir, stderr)


def test_sigterm_over_stdio_with_an_idle_client_exits_zero(tmp_path: Path) -> None:
    env, _signer, data_dir = _setup(tmp_path)
    server = StdioServer(env)
    server.initialize()  # the client stays connected and says nothing more
    server.process.send_signal(signal.SIGTERM)
    code = server.process.wait(EXIT_TIMEOUT_S)
    assert server.process.stderr is not None
    stderr = server.process.stderr.read()
    assert code == 0, stderr.decode()
    assert_closed_cleanly(data_dir, stderr)


def test_sigterm_over_stdio_answers_the_call_in_flight_first(tmp_path: Path) -> None:
    env, signer, data_dir = _setup(tmp_path, **{ENV_VAR: f"{PAUSE_BEFORE_COMMIT}:{CAPTURE}"})
    arguments = demo_capture_arguments("Held over stdio.", f"graceful-stdio-{uuid.uuid4().hex}")
    server = StdioServer(env)
    assert server.process.stderr is not None
    server.initialize()
    server.call(1, CAPTURE, dict(arguments), invocation_meta(signer))
    read_until(server.process.stderr, b"paused until cancelled")
    server.process.send_signal(signal.SIGTERM)
    answer = server.answer(1)
    code = server.process.wait(EXIT_TIMEOUT_S)
    stderr = server.process.stderr.read()
    assert code == 0, stderr.decode()
    envelope = answer["result"]["structuredContent"]
    assert envelope["ok"] is True, envelope
    assert envelope["output"]["value"]["status"] == "committed_pending"
    assert_closed_cleanly(data_dir, stderr)

    again = StdioServer({k: v for k, v in env.items() if k != ENV_VAR})
    again.initialize()
    again.call(2, CAPTURE, dict(arguments), invocation_meta(signer))
    replay = again.answer(2)["result"]["structuredContent"]
    assert (
        replay["output"]["value"]["status"] == "duplicate_exact"
    )  # the committed capture, replayed
    assert again.process.stdin is not None
    again.process.stdin.close()  # EOF: the ordinary end of a stdio session
    assert again.process.wait(EXIT_TIMEOUT_S) == 0
