"""audit/queries/host_refusals.sql on a real export: refusals before binding, per peer and
reason, with exact counts across individual and summary entries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import pytest

from engram_memory.admin.verification import export_data_dir
from engram_memory.contract.exceptions import ProtocolRefusal
from engram_memory.core.runtime import Services
from engram_memory.tools.dispatch import CallRequest, MemoryService
from tests.audit.test_auditor_queries import QUERIES, _auditor
from tests.harness import Caller


def test_host_refusals_count_every_refusal_per_peer_and_reason(
    services: Services, tmp_path: Path
) -> None:
    settings = dataclasses.replace(services.settings, refusal_burst=2)
    service = MemoryService(dataclasses.replace(services, settings=settings))
    alice = Caller(service)
    get = {"record_id": "mem_" + "a" * 52, "purpose_ref": alice.purpose_ref}
    for _ in range(7):
        with pytest.raises(ProtocolRefusal):
            service.call_tool(CallRequest("engram_memory_get", get, "not-a-token", peer="10.0.0.7"))
    with pytest.raises(ProtocolRefusal):
        service.call_tool(CallRequest("engram_memory_get", get, None, peer="10.0.0.8"))
    service.close()  # the owed summary is written
    services.database.checkpoint()
    services.database.close()
    export_dir = tmp_path / "export"
    export_data_dir(tmp_path / "data", export_dir)
    con: duckdb.DuckDBPyConnection = _auditor(export_dir)
    unbounded = {"from": None, "to": None}
    rows = con.execute((QUERIES / "host_refusals.sql").read_text(), unbounded).fetchall()
    assert [row[:6] for row in rows] == [
        ("10.0.0.7", "in-process", "token_invalid", "engram_memory_get", 7, 3),
        ("10.0.0.8", "in-process", "token_missing", "engram_memory_get", 1, 1),
    ]
