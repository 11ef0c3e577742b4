"""Real server processes for end-to-end tests: their environment, and `serve --transport
http` on a free loopback port (stdio servers are spawned by the SDK client itself)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from engram_memory.client.reference_host import (
    server_env as server_env,  # re-exported for the tests
)
from engram_memory.client.reference_host import wait_until_listening


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(
    env: dict[str, str], *, stderr: int | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`serve --transport http` with `env`, listening; yields (process, MCP URL)."""
    port = free_port()
    command = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "http"]
    process = subprocess.Popen([*command, "--port", str(port)], env=env, stderr=stderr)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_until_listening(url, process)
        yield process, url
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=20)
