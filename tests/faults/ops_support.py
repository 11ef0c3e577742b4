"""Shared by the ops fault tests (graceful stop, backup while serving): a real server
process over stdio spoken to as raw JSON-RPC lines, and waits on its output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import IO, Any

from engram_memory.admin.channel import channel_path
from engram_memory.client.reference_host import Binding
from engram_memory.host.context import INVOCATION_META_KEY, mint_invocation
from engram_memory.host.keys import HostSigningKey
from engram_memory.store.connection import DATABASE_FILE

ALICE = Binding("acme", "support", "user:alice", "purpose:support-case")
CAPTURE = "engram_memory_capture"


def read_until(stream: IO[bytes], marker: bytes) -> bytes:
    """Every line up to and including the first one holding `marker` (fails at EOF)."""
    seen = b""
    for line in stream:
        seen += line
        if marker in line:
            return seen
    raise AssertionError(f"the stream ended before {marker!r}; it said:\n{seen.decode()}")


def invocation_meta(signer: HostSigningKey, binding: Binding = ALICE) -> dict[str, Any]:
    token = mint_invocation(
        signer,
        host_id=binding.host_id,
        tenant=binding.tenant,
        workspace=binding.workspace,
        principal=binding.principal,
        agent_id=binding.agent_id,
        session=binding.session,
        purpose_ref=binding.purpose_ref,
        audit_id=f"audit:{uuid.uuid4().hex}",
    )
    return {INVOCATION_META_KEY: token}


class StdioServer:
    """`serve` (stdio) as a child process, spoken to one JSON-RPC line at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        command = [sys.executable, "-m", "engram_memory.cli", "serve"]
        self.process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def answer(self, request_id: int) -> dict[str, Any]:
        """The next answer to `request_id` on stdout (notifications are skipped)."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message: dict[str, Any] = json.loads(line)
            if message.get("id") == request_id:
                return message
        raise AssertionError("stdout closed before the answer")

    def initialize(self) -> None:
        """The MCP handshake; once answered, the server serves."""
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "fault-test", "version": "0"},
                },
            }
        )
        assert "result" in self.answer(0)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, request_id: int, tool: str, arguments: dict[str, Any], meta: Any) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments, "_meta": meta},
            }
        )


def environment_for_channel(env: dict[str, str]) -> dict[str, str]:
    """`env` plus this process's runtime directory, so both agree on the socket path."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return {**env, "XDG_RUNTIME_DIR": runtime} if runtime else env


def assert_closed_cleanly(data_dir: Path, stderr: bytes) -> None:
    """No traceback, no maintenance socket left, the WAL folded into the store file."""
    assert b"Traceback" not in stderr, stderr.decode()
    assert not channel_path(data_dir).exists()
    wal = data_dir / (DATABASE_FILE + ".wal")
    assert not wal.exists() or wal.stat().st_size == 0
