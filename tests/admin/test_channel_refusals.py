"""Maintenance-channel refusals before a command runs reach the host-level audit stream
(issue 9): a foreign peer, an oversized, non-JSON or malformed request."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from engram_memory.admin.channel import MAX_REQUEST_BYTES, maintenance_channel
from engram_memory.core.runtime import Services
from engram_memory.tools.dispatch import MemoryService


def _send(path: Path, payload: bytes) -> list[dict[str, object]]:
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(str(path))
        connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        with connection.makefile("rb") as replies:
            return [json.loads(line) for line in replies]


def _host_stream(services: Services) -> list[tuple[str, str, str, str]]:
    with services.database.reading() as tx:
        rows = tx.fetchall(
            "SELECT transport, peer, tool, reason FROM audit_entries"
            " WHERE scope_ref = 'host' ORDER BY sequence"
        )
    return [(str(a), str(b), str(c), str(d)) for a, b, c, d in rows]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json\n", "parse_error"),
        (b'{"command": "history"}\n', "invalid_request"),
        (b"{" + b" " * MAX_REQUEST_BYTES + b"}\n", "request_too_large"),
    ],
    ids=["not-json", "malformed", "huge"],
)
def test_a_malformed_channel_request_is_audited_in_the_host_stream(
    services: Services, tmp_path: Path, payload: bytes, reason: str
) -> None:
    service = MemoryService(services)
    with maintenance_channel(
        services, tmp_path / "data", refused=service.refused_before_binding
    ) as path:
        assert _send(path, payload) == [{"ok": False, "code": "INVALID_SCHEMA"}]
    assert _host_stream(services) == [("maintenance", f"uid:{os.getuid()}", "maintenance", reason)]


def test_a_connection_from_another_user_is_audited_in_the_host_stream(
    services: Services, tmp_path: Path
) -> None:
    service = MemoryService(services)
    with maintenance_channel(
        services,
        tmp_path / "data",
        allowed_uid=os.getuid() + 1,
        refused=service.refused_before_binding,
    ) as path:
        assert _send(path, b"{}\n") == [{"ok": False, "code": "UNAUTHORIZED"}]
    assert _host_stream(services) == [
        ("maintenance", f"uid:{os.getuid()}", "maintenance", "maintenance_refused")
    ]
