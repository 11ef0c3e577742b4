"""Runs examples/host/host.py as a user would: a subprocess with a config file and answers
piped on stdin, against the real server over stdio (spawned by the host) or streamable HTTP
(started here)."""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import wait_until_listening
from engram_memory.core.failpoints import ENV_VAR
from tests.servers import bound_port

REPO = Path(__file__).resolve().parents[2]
HOST_DIR = REPO / "examples" / "host"
HOST_PY = HOST_DIR / "host.py"
BINDING = {
    "tenant": "acme",
    "workspace": "support",
    "principal": "user:alice",
    "purpose_ref": "purpose:support-case",
}


@dataclass(frozen=True)
class HostRun:
    returncode: int
    documents: list[Any]  # every JSON document the host printed on stdout, in order
    stderr: str

    @property
    def envelope(self) -> dict[str, Any]:
        assert len(self.documents) == 1, self.documents
        document: dict[str, Any] = self.documents[0]
        return document


def _documents(stdout: str) -> list[Any]:
    decoder, documents, index = json.JSONDecoder(), list[Any](), 0
    while True:
        while index < len(stdout) and stdout[index].isspace():
            index += 1
        if index == len(stdout):
            return documents
        document, index = decoder.raw_decode(stdout, index)
        documents.append(document)


class InteractiveHost:
    """A running host REPL. `read_document` waits (bounded, on the pipe) for the next JSON
    document the host prints; prompts go to stderr, kept in a file for diagnostics."""

    def __init__(self, argv: list[str]) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=REPO,
        )
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._stdin, self._stdout = self._process.stdin, self._process.stdout
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._stdout, selectors.EVENT_READ)
        self._buffer = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    def type(self, *lines: str) -> None:
        for line in lines:
            self._stdin.write(line.encode("utf-8") + b"\n")
        self._stdin.flush()

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def read_document(self, timeout: float = 180.0) -> Any:
        deadline = time.monotonic() + timeout
        decoder = json.JSONDecoder()
        while True:
            text = self._buffer.lstrip()
            if text:
                try:
                    document, end = decoder.raw_decode(text)
                except ValueError:
                    pass  # incomplete: wait for more output
                else:
                    self._buffer = text[end:]
                    return document
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                raise AssertionError(f"no result from the host in time:\n{self.stderr()}")
            chunk = os.read(self._stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"host exited:\n{self.stderr()}")
            self._buffer += self._decoder.decode(chunk)

    def interrupt(self) -> None:
        """What Ctrl-C at the terminal does to the host."""
        self._process.send_signal(signal.SIGINT)

    def exit_code(self, timeout: float = 60.0) -> int:
        """Wait (bounded) for the host to exit on its own; its exit code."""
        return self._process.wait(timeout=timeout)

    def close(self) -> None:
        """Send `quit` and wait for the host (and a stdio server with it) to exit."""
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.type("quit")
            self._stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        finally:
            self._selector.close()
            self._stdout.close()
            self._stderr.close()


@dataclass(frozen=True)
class HostSetup:
    transport: str
    config: Path
    data_dir: Path
    server: subprocess.Popen[bytes] | None

    def run(self, *command: str, answers: str = "") -> HostRun:
        """One host invocation; `answers` is what the human types (stdin)."""
        completed = subprocess.run(
            [sys.executable, str(HOST_PY), "--config", str(self.config), *command],
            input=answers,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            cwd=REPO,
        )
        return HostRun(completed.returncode, _documents(completed.stdout), completed.stderr)

    def with_config(self, name: str, **changes: Any) -> HostSetup:
        """The same server, driven by a host config with top-level `changes`."""
        config = {**json.loads(self.config.read_text("utf-8")), **changes}
        path = self.config.with_name(name)
        path.write_text(json.dumps(config), "utf-8")
        return replace(self, config=path)

    @contextlib.contextmanager
    def session(self) -> Iterator[InteractiveHost]:
        """The host's REPL with a pipe for stdin: type a line, read the next result."""
        host = InteractiveHost([sys.executable, str(HOST_PY), "--config", str(self.config), "repl"])
        try:
            yield host
        finally:
            host.close()

    def stop_server(self) -> None:
        """Release the store (stdio servers exit with their host)."""
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()
            self.server.wait(timeout=20)


@contextlib.contextmanager
def _host_setup(
    transport: str, tmp_path: Path, extra_server_env: Mapping[str, str] | None = None
) -> Iterator[HostSetup]:
    root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
    data_dir = tmp_path / "data"
    server_env = {
        "ENGRAM_DATA_DIR": str(data_dir),
        "ENGRAM_HOST_KEYS": str(public_keys),
        "ENGRAM_ROOT_KEY": str(root_key),
        "ENGRAM_POLICY": "embedded",
        "ENGRAM_MEMORY_ENABLED": "true",
        **(extra_server_env or {}),
    }
    config: dict[str, Any] = {
        "signing_key": str(signing_key),
        "binding": BINDING,
        "retry_backoff_seconds": 0,
    }
    process: subprocess.Popen[bytes] | None = None
    if transport == "stdio":
        config["server"] = {
            "command": sys.executable,
            "args": ["-m", "engram_memory.cli", "serve", "--transport", "stdio"],
            "env": server_env,
        }
        # The host reads the approver's name from the config; over HTTP it asks for it.
        config["approver"] = "human:test-operator"
    else:
        # Port 0, reported back: no probed port another xdist worker could take first.
        port_file = tmp_path / "port"
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "http"),
                *("--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file)),
            ],
            env={**os.environ, **server_env},
        )
        port = bound_port(port_file, process)
        config["server"] = {"url": f"http://127.0.0.1:{port}/mcp"}
    path = tmp_path / "host.json"
    path.write_text(json.dumps(config), "utf-8")
    setup = HostSetup(transport, path, data_dir, process)
    try:
        if process is not None:
            wait_until_listening(str(config["server"]["url"]), process)
        yield setup
    finally:
        setup.stop_server()


@pytest.fixture(params=["stdio", "http"])
def host_setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HostSetup]:
    with _host_setup(str(request.param), tmp_path) as setup:
        yield setup


@pytest.fixture
def http_host_setup(tmp_path: Path) -> Iterator[HostSetup]:
    with _host_setup("http", tmp_path) as setup:
        yield setup


@pytest.fixture
def lossy_stdio_host_setup(tmp_path: Path) -> Iterator[HostSetup]:
    """A stdio server whose first committed capture answer is lost (test-only failpoint)."""
    failpoint = {ENV_VAR: "drop_response_after_commit:engram_memory_capture"}
    with _host_setup("stdio", tmp_path, failpoint) as setup:
        yield setup


@pytest.fixture
def crashing_stdio_host_setup(tmp_path: Path) -> Iterator[HostSetup]:
    """A stdio server that SIGKILLs itself right after its first capture commits
    (test-only failpoint): the answer never comes, the capture is in the store."""
    failpoint = {ENV_VAR: "kill_after_commit:engram_memory_capture"}
    with _host_setup("stdio", tmp_path, failpoint) as setup:
        yield setup
