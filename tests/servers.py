"""Real server processes for end-to-end tests: their environment, and `serve --transport
http` on a port the server itself binds (stdio servers are spawned by the SDK client itself).

Parallel-safe (pytest-xdist): a server binds port 0 and reports the port the kernel gave it
through `--port-file`; nothing probes a free port and releases it for another worker's server
to take first.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from engram_memory.client.reference_host import (
    server_env as server_env,  # re-exported for the tests
)
from engram_memory.client.reference_host import wait_until_listening

SERVE = (sys.executable, "-m", "engram_memory.cli", "serve")


def free_port() -> int:
    """A port nothing listens on, for tests that need a refused connection (a dead policy
    server, an upstream that is down). Never for a server of ours to bind: use
    `start_http_server`, which binds port 0."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bound_port(port_file: Path, process: subprocess.Popen[bytes], attempts: int = 2400) -> int:
    """The port `serve --port 0 --port-file` reports once bound.

    Raises:
        RuntimeError: the process exited first, or never reported within the attempts.
    """
    for _ in range(attempts):
        try:
            text = port_file.read_text(encoding="ascii")
        except FileNotFoundError:
            try:
                code = process.wait(timeout=0.05)  # waits on the process: no bare sleep
            except subprocess.TimeoutExpired:
                continue
            raise RuntimeError(f"server exited before binding, code {code}") from None
        return int(text)
    raise RuntimeError("server never reported its port")


@contextmanager
def start_http_server(
    args: Sequence[str],
    env: dict[str, str],
    *,
    stdout: int | IO[bytes] | None = None,
    stderr: int | IO[bytes] | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`serve --transport http ARGS --port 0` started (not waited for); yields (process, port).

    The process is stopped (SIGTERM, then waited) on exit if it still runs.
    """
    with tempfile.TemporaryDirectory(prefix="engram-port-") as scratch:
        port_file = Path(scratch) / "port"
        command = [*SERVE, "--transport", "http", *args, "--port", "0"]
        process = subprocess.Popen(
            [*command, "--port-file", str(port_file)], env=env, stdout=stdout, stderr=stderr
        )
        try:
            yield process, bound_port(port_file, process)
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=20)


@contextmanager
def http_server(
    env: dict[str, str], *, stderr: int | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`serve --transport http` with `env`, listening; yields (process, MCP URL)."""
    with start_http_server((), env, stderr=stderr) as (process, port):
        url = f"http://127.0.0.1:{port}/mcp"
        wait_until_listening(url, process)
        yield process, url
