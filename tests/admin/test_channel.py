"""The host-only maintenance channel: `engram-memory admin` while a server runs.

A real `serve --transport http` process holds the DuckDB file; admin commands from the shell
run inside it over the Unix socket, and agents keep being served throughout.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.channel import (
    MAX_REQUEST_BYTES,
    channel_path,
    maintenance_channel,
    runtime_directory,
    send_command,
)
from engram_memory.admin.commands import AdminCommand
from engram_memory.admin.host_setup import SIGNING_KEY_FILE
from engram_memory.admin.maintenance import Operator
from engram_memory.client.reference_host import Binding, connect
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ConfigurationError, ToolError
from engram_memory.core.runtime import Services
from engram_memory.host.keys import HostSigningKey
from engram_memory.tools.dispatch import MemoryService
from engram_memory.transport.stopping import GracefulStop
from tests.admin.test_rotation_cli import _admin, _cli
from tests.admin.test_rotation_cli import prepared as prepared  # the same prepared store
from tests.harness import Caller
from tests.servers import http_server
from tests.tools.test_tool_rules import accepted_record

DANA = Operator("acme", "support", "human:dana")
ALICE = Binding("acme", "support", "user:alice", "purpose:support-case")


@pytest.fixture
def running_server(
    prepared: tuple[dict[str, str], list[str]],
) -> Iterator[tuple[dict[str, str], str]]:
    """`serve --transport http` on the prepared store; yields (env, MCP URL)."""
    env, _ = prepared
    env = {**env, "ENGRAM_MEMORY_ENABLED": "true", "ENGRAM_POLICY": "embedded"}
    with http_server(env) as (_process, url):
        yield env, url


async def _get_code(url: str, signer: HostSigningKey, record_id: str) -> str:
    async with connect(url, signer, ALICE) as host:
        outcome = await host.call(
            "engram_memory_get", {"record_id": record_id, "purpose_ref": ALICE.purpose_ref}
        )
    return "ok" if outcome.envelope["ok"] else str(outcome.envelope["error"]["code"])


async def test_admin_commands_run_inside_a_running_server_while_agents_are_served(
    prepared: tuple[dict[str, str], list[str]],
    running_server: tuple[dict[str, str], str],
) -> None:
    _, records = prepared
    env, url = running_server
    signer = HostSigningKey.from_pem_file(Path(env["ENGRAM_ROOT_KEY"]).parent / SIGNING_KEY_FILE)
    assert await _get_code(url, signer, records[0]) == "ok"

    disputed = _admin(env, "dispute", records[0], "--reason", "reason:contested")
    assert disputed.returncode == 0, disputed.stderr
    assert json.loads(disputed.stdout)["value"]["to_state"] == "accepted_disputed"
    assert await _get_code(url, signer, records[0]) == "NOT_FOUND"  # the server's own view

    # Rotation without downtime, from the shell: progress streams back over the channel.
    rotated = _admin(env, "rotate-scope-key")
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout)["value"]["complete"] is True
    assert "key files 3/3" in rotated.stderr
    assert await _get_code(url, signer, records[1]) == "ok"

    # Compaction swaps the store file under the running server, which keeps serving.
    compacted = _admin(env, "compact")
    assert compacted.returncode == 0, compacted.stderr
    assert await _get_code(url, signer, records[2]) == "ok"

    reader = ["--tenant", "acme", "--workspace", "support", "--operator", "human:erin"]
    refused = _cli(env, "admin", *reader, "rotate-scope-key")
    assert refused.returncode == 1
    assert json.loads(refused.stdout) == {"ok": False, "code": "UNAUTHORIZED"}
    history = _admin(env, "history", records[0])
    assert history.returncode == 0, history.stderr
    operations = [event["operation"] for event in json.loads(history.stdout)["value"]["events"]]
    assert operations[-1] == "dispute"


def test_without_a_server_admin_opens_the_store_itself_even_past_a_dead_socket(
    prepared: tuple[dict[str, str], list[str]],
) -> None:
    env, records = prepared
    dead = channel_path(Path(env["ENGRAM_DATA_DIR"]))
    with socket.socket(socket.AF_UNIX) as orphan:  # a crashed server's socket file
        orphan.bind(str(dead))
    try:
        history = _admin(env, "history", records[0])
        assert history.returncode == 0, history.stderr
    finally:
        dead.unlink(missing_ok=True)


def _raw_request(path: Path, payload: bytes) -> list[dict[str, Any]]:
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(str(path))
        connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        with connection.makefile("rb") as replies:
            return [json.loads(line) for line in replies]


@pytest.mark.parametrize(
    "payload",
    [
        b"not json\n",
        b'{"command": "history"}\n',
        json.dumps(
            {**AdminCommand.from_values("history", DANA, {"target_id": "x"}).as_json(), "x": 1}
        ).encode()
        + b"\n",
        json.dumps(
            {
                **AdminCommand.from_values("history", DANA, {"target_id": "x"}).as_json(),
                "command": "restore",
            }
        ).encode()
        + b"\n",
        b"{" + b" " * MAX_REQUEST_BYTES + b"}\n",
    ],
    ids=["not-json", "missing-fields", "extra-field", "restore-is-not-a-channel-command", "huge"],
)
def test_a_malformed_channel_request_is_refused_with_invalid_schema(
    services: Services, tmp_path: Path, payload: bytes
) -> None:
    with maintenance_channel(services, tmp_path / "data") as path:
        assert _raw_request(path, payload) == [{"ok": False, "code": "INVALID_SCHEMA"}]


def test_a_connection_from_another_user_is_refused(services: Services, tmp_path: Path) -> None:
    command = AdminCommand.from_values("history", DANA, {"target_id": "x"})
    with (
        maintenance_channel(services, tmp_path / "data", allowed_uid=os.getuid() + 1),
        pytest.raises(ToolError) as refused,
    ):
        send_command(tmp_path / "data", command, lambda _line: None)
    assert refused.value.code is ErrorCode.UNAUTHORIZED


def test_channel_refusals_carry_the_operations_own_code_and_progress_streams(
    services: Services, tmp_path: Path
) -> None:
    alice = Caller(MemoryService(services))
    record_id = accepted_record(alice, "Streamed over the channel.")
    lines: list[str] = []
    with maintenance_channel(services, tmp_path / "data"):
        rotate = AdminCommand.from_values("rotate-scope-key", DANA, {})
        result = send_command(tmp_path / "data", rotate, lines.append)
        assert result is not None
        assert result["complete"] is True
        assert "  key files 1/1" in lines  # progress, streamed before the result
        rewind = AdminCommand.from_values(
            "rewind", DANA, {"record_id": record_id, "reason": "reason:r"}
        )
        with pytest.raises(ToolError) as illegal:
            send_command(tmp_path / "data", rewind, lines.append)
    assert illegal.value.code is ErrorCode.ILLEGAL_TRANSITION


def test_a_runtime_directory_others_can_enter_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "engram-memory").mkdir(mode=0o755)
    (tmp_path / "engram-memory").chmod(0o755)
    with pytest.raises(ConfigurationError):
        runtime_directory()
    (tmp_path / "engram-memory").chmod(0o700)
    assert runtime_directory() == tmp_path / "engram-memory"


def test_a_runtime_directory_whose_parent_is_missing_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "absent"))
    with pytest.raises(ConfigurationError):
        runtime_directory()


def test_a_runtime_directory_too_long_for_a_socket_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 100)
    deep.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    with pytest.raises(ConfigurationError):
        channel_path(tmp_path / "data")


def test_a_server_that_hangs_up_before_reading_is_reported_as_a_refusal(tmp_path: Path) -> None:
    """An older server closed on a foreign peer unread: the client's broken pipe or reset
    is that refusal, never a raw exception."""
    command = AdminCommand.from_values("history", DANA, {"target_id": "x"})
    path = channel_path(tmp_path / "data")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen(1)
        hang_up = threading.Thread(target=lambda: listener.accept()[0].close())
        hang_up.start()
        try:
            with pytest.raises(ToolError) as refused:
                send_command(tmp_path / "data", command, lambda _line: None)
        finally:
            hang_up.join(timeout=10)
            path.unlink(missing_ok=True)
    assert refused.value.code is ErrorCode.UNAUTHORIZED


def test_once_the_server_is_stopping_a_new_command_is_refused_as_retriable(
    services: Services, tmp_path: Path
) -> None:
    command = AdminCommand.from_values("history", DANA, {"target_id": "x"})
    stop = GracefulStop()
    with maintenance_channel(services, tmp_path / "data", stop=stop) as path:
        stop.begin()
        with pytest.raises(ToolError) as refused:
            send_command(tmp_path / "data", command, lambda _line: None)
    assert refused.value.code is ErrorCode.STORE_UNAVAILABLE
    assert not path.exists()  # the socket goes with the channel
