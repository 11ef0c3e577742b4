"""Raw-wire clients for the adversarial tests: bytes written to the real server process as an
attacker would, over stdio (its stdin/stdout) and streamable HTTP (POSTed bodies), with
every read bounded by a deadline."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import Binding, mint_for
from engram_memory.host.context import INVOCATION_META_KEY
from engram_memory.host.keys import HostSigningKey
from tests.servers import http_server, server_env

PROTOCOL_VERSION = "2025-11-25"
DEADLINE_S = 20.0
ALICE = Binding(
    tenant="acme", workspace="support", principal="user:alice", purpose_ref="purpose:support-case"
)


@dataclass(frozen=True)
class Secrets:
    env: dict[str, str]
    signer: HostSigningKey

    def token(self, binding: Binding = ALICE) -> str:
        """A fresh invocation token (fresh audit_id), as the reference host mints one."""
        return mint_for(self.signer, binding)


def make_secrets(root: Path, **extra_env: str) -> Secrets:
    root_key, signing_key, public_keys = init_host_dir(root / "secrets")
    env = server_env(root / "data", root_key, public_keys, **extra_env)
    return Secrets(env, HostSigningKey.from_pem_file(signing_key))


def request(request_id: object, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def search_call(request_id: object, token: str, query: str = "anything") -> bytes:
    """A legitimate tools/call (search) with `token`."""
    arguments = {"query": query, "purpose_ref": ALICE.purpose_ref}
    params = {"name": "engram_memory_search", "arguments": arguments}
    return request(request_id, "tools/call", {**params, "_meta": {INVOCATION_META_KEY: token}})


_INITIALIZE = {
    "protocolVersion": PROTOCOL_VERSION,
    "capabilities": {},
    "clientInfo": {"name": "attacker", "version": "0"},
}
_INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


class RawStdio:
    """The server process over stdio; `send` writes raw bytes plus a newline."""

    def __init__(
        self,
        env: dict[str, str] | None,
        command: list[str] | None = None,
        stderr: int | None = None,
    ) -> None:
        """`command` defaults to `serve --transport stdio`; `env` None inherits ours;
        `stderr=subprocess.PIPE` keeps what the server says there (a few lines at most)."""
        command = command or [
            sys.executable,
            "-m",
            "engram_memory.cli",
            "serve",
            "--transport",
            "stdio",
        ]
        self.process = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)

    def send(self, raw: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(raw + b"\n")
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        """The next message the server writes (fails after the deadline)."""
        try:
            line = self._lines.get(timeout=DEADLINE_S)
        except queue.Empty:
            raise AssertionError("the server did not answer within the deadline") from None
        message: dict[str, Any] = json.loads(line)
        return message

    def remaining(self) -> list[dict[str, Any]]:
        """Every message written and not yet received (call once the process ended)."""
        assert self.process.poll() is not None
        self._reader.join(timeout=DEADLINE_S)  # stdout read to its end
        messages: list[dict[str, Any]] = []
        while not self._lines.empty():
            messages.append(json.loads(self._lines.get_nowait()))
        return messages

    def exchange(self, raw: bytes) -> dict[str, Any]:
        self.send(raw)
        return self.receive()

    def initialize(self) -> dict[str, Any]:
        """Initialize; the server's `initialize` result."""
        answer = self.exchange(request(0, "initialize", _INITIALIZE))
        assert "result" in answer
        self.send(_INITIALIZED)
        result: dict[str, Any] = answer["result"]
        return result

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def raw_stdio(env: dict[str, str]) -> Iterator[RawStdio]:
    """An initialized stdio session with the real server."""
    client = RawStdio(env)
    try:
        client.initialize()
        yield client
    finally:
        client.close()


def _message_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response, a JSON body or the first SSE data event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message: dict[str, Any] = json.loads(line[5:])
                return message
        raise AssertionError("no message in the event stream")
    body: dict[str, Any] = response.json()
    return body


@dataclass
class HttpAnswer:
    status: int
    message: dict[str, Any]


class RawHttp:
    """One streamable HTTP session with the server; `post` sends a raw body in it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(timeout=DEADLINE_S)
        self.headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        opened = self.client.post(
            url, content=request(0, "initialize", _INITIALIZE), headers=self.headers
        )
        assert opened.status_code == 200
        self.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = PROTOCOL_VERSION
        assert self.client.post(url, content=_INITIALIZED, headers=self.headers).status_code == 202

    def post(self, raw: bytes) -> HttpAnswer:
        response = self.client.post(self.url, content=raw, headers=self.headers)
        return HttpAnswer(response.status_code, _message_of(response))

    def close(self) -> None:
        self.client.close()


@contextmanager
def serving_http(env: dict[str, str]) -> Iterator[str]:
    with http_server(env) as (_process, url):
        yield url
