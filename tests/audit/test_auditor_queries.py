"""The auditor's path: export, then answer the usual questions with plain DuckDB SQL."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from engram_memory.admin.verification import export_data_dir
from engram_memory.contract.digests import principal_ref
from engram_memory.contract.exceptions import AuditChainBroken, ProtocolRefusal
from engram_memory.core.runtime import Services
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record, code, value

QUERIES = Path(__file__).resolve().parents[2] / "audit" / "queries"


def _auditor(export_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for table in ("audit_entries", "decision_receipts", "journal_events"):
        source = export_dir / f"{table}.parquet"
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM '{source}'")  # noqa: S608 - test paths
    return con


def _query(con: duckdb.DuckDBPyConnection, name: str, **params: str) -> list[tuple[object, ...]]:
    unbounded: dict[str, object] = {"from": None, "to": None}  # the time range, unbounded
    return con.execute((QUERIES / f"{name}.sql").read_text(), unbounded | params).fetchall()


@pytest.fixture
def exported(alice: Caller, services: Services, tmp_path: Path) -> tuple[Path, str, str]:
    record_id = accepted_record(alice, "Invoice dispute resolved.")
    read = alice.call(
        "engram_memory_get", {"record_id": record_id, "purpose_ref": alice.purpose_ref}
    )
    value(read)
    assert (
        code(
            alice.as_(tenant="globex", workspace="main", principal="user:carol").call(
                "engram_memory_get", {"record_id": record_id, "purpose_ref": alice.purpose_ref}
            )
        )
        == "NOT_FOUND"
    )
    with pytest.raises(ProtocolRefusal):
        alice.call("engram_memory_search", {"query": "x", "purpose_ref": "purpose:other"})
    services.database.checkpoint()
    data_dir = tmp_path / "data"
    services.database.close()
    export_dir = tmp_path / "export"
    export_data_dir(data_dir, export_dir)
    return export_dir, record_id, str(read["auditId"])


def test_export_manifest_pins_chain_heads_and_file_digests(exported: tuple[Path, str, str]) -> None:
    export_dir, _, _ = exported
    manifest = json.loads((export_dir / "manifest.json").read_text())
    assert manifest["audit_head"]["sequence"] == sum(
        f["rows"] for f in manifest["files"] if f["name"] == "audit_entries.parquet"
    )
    assert manifest["journal_heads"]["tenant:acme/workspace:support"]["cursor"] == "2"


def test_who_read_record_names_the_reader_and_the_refused_foreigner(
    exported: tuple[Path, str, str],
) -> None:
    export_dir, record_id, _ = exported
    rows = _query(_auditor(export_dir), "who_read_record", record_id=record_id)
    readers = {(row[3], row[4]) for row in rows}
    assert ("ok", principal_ref("acme", "user:alice")) in readers
    assert ("NOT_FOUND", principal_ref("globex", "user:carol")) in readers


def test_refusals_for_tenant_include_protocol_refusals(exported: tuple[Path, str, str]) -> None:
    export_dir, _, _ = exported
    outcomes = {
        row[4] for row in _query(_auditor(export_dir), "refusals_for_tenant", tenant="acme")
    }
    assert "rpc:-32603" in outcomes
    assert "ok" not in outcomes


def test_which_bundle_decided_a_call_lists_its_receipts(exported: tuple[Path, str, str]) -> None:
    export_dir, _, audit_id = exported
    rows = _query(_auditor(export_dir), "which_bundle_decided", audit_id=audit_id)
    assert {row[0] for row in rows} == {"engram/discovery/decision", "engram/authz/decision"}
    assert all(str(row[1]).endswith(str(row[2])) for row in rows)  # revision embeds digest


def test_decisions_per_revision_and_target_lifecycle(exported: tuple[Path, str, str]) -> None:
    export_dir, record_id, _ = exported
    con = _auditor(export_dir)
    assert sum(int(row[5]) for row in _query(con, "decisions_per_revision")) > 0
    operations = [row[3] for row in _query(con, "lifecycle_of_target", target_id=record_id)]
    assert operations == ["capture", "accept"]


def test_export_of_a_tampered_store_is_refused(
    alice: Caller, services: Services, tmp_path: Path
) -> None:
    accepted_record(alice)
    with services.database.transaction() as tx:
        tx.execute("UPDATE audit_entries SET outcome = 'ok' WHERE sequence = 1")
        tx.execute("UPDATE audit_entries SET detail = 'edited' WHERE sequence = 1")
    services.database.close()
    with pytest.raises(AuditChainBroken):
        export_data_dir(tmp_path / "data", tmp_path / "export")
    assert not (tmp_path / "export").exists()


def test_who_approved_names_the_human_behind_each_destructive_call(
    alice: Caller, services: Services, tmp_path: Path
) -> None:
    record_id = accepted_record(alice, "Approved for removal.")
    args = {"record_id": record_id, "idempotency_key": "forget-key-0000001"}
    args["reason_ref"] = "reason:r"
    value(
        alice.call(
            "engram_memory_forget",
            args,
            alice.confirm(
                "engram_memory_forget", args, record_id, approver="human:dana", jti="jti-dana"
            ),
        )
    )
    stray = {**args, "idempotency_key": "forget-key-00000002"}
    refused = alice.call(
        "engram_memory_forget",
        stray,
        alice.confirm("engram_memory_forget", stray, record_id, approver="human: "),
    )
    assert code(refused) == "gate_failed"
    services.database.close()
    export_data_dir(tmp_path / "data", tmp_path / "export")
    rows = _query(_auditor(tmp_path / "export"), "who_approved_destructive_calls")
    approved = [row for row in rows if row[5] is not None]
    assert [(row[3], row[4], row[5], row[6], row[13]) for row in approved] == [
        ("engram_memory_forget", "ok", "human:dana", "jti-dana", f"tombstone:{record_id}")
    ]
    assert [(row[4], row[5]) for row in rows if row[5] is None] == [("gate_failed", None)]
