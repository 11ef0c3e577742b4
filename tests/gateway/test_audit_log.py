"""The gateway audit log: hash chain, fsynced lines, restarts, one owner, verification."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from engram_memory.contract.digests import principal_ref
from engram_memory.contract.exceptions import GatewayAuditInvalid, GatewayAuditUnavailable
from engram_memory.gateway.audit_bound import AuditBound
from engram_memory.gateway.audit_log import GENESIS_HASH, GatewayAudit, verify_audit
from tests.gateway.callers import DESKTOP_CALLER

CALLER = DESKTOP_CALLER


def _entries(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_entries_chain_from_genesis_and_hold_the_hashed_principal_only(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with GatewayAudit.open(path, "host:gw") as audit:
        first = audit.record("caller_refused", reason="purpose_not_allowed", caller=CALLER)
        audit.record("confirmation", reason="declined", caller=CALLER, tool="t", target="x")
    entries = _entries(path)
    assert [entry["seq"] for entry in entries] == [1, 2]
    assert entries[0]["audit_id"] == first
    assert str(first).startswith("audit:gw-")
    assert entries[0]["prev_hash"] == GENESIS_HASH
    assert entries[1]["prev_hash"] == entries[0]["entry_hash"]
    assert entries[0]["principal_ref"] == principal_ref("acme", "user:alice")
    assert "user:alice" not in path.read_text(encoding="utf-8")
    assert path.stat().st_mode & 0o777 == 0o600
    assert verify_audit(path) == 2


def test_a_restart_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with GatewayAudit.open(path, "host:gw") as audit:
        audit.record("upstream_unavailable", reason="connect_failed")
    with GatewayAudit.open(path, "host:gw") as audit:
        audit.record("upstream_unavailable", reason="connect_failed")
    entries = _entries(path)
    assert entries[1]["seq"] == 2
    assert entries[1]["prev_hash"] == entries[0]["entry_hash"]
    assert verify_audit(path) == 2


def test_a_second_writer_of_the_same_log_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with GatewayAudit.open(path, "host:gw"), pytest.raises(GatewayAuditUnavailable):
        GatewayAudit.open(path, "host:gw")


def test_a_log_in_a_missing_directory_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(GatewayAuditUnavailable):
        GatewayAudit.open(tmp_path / "absent" / "audit.jsonl", "host:gw")


@pytest.mark.parametrize("damage", ["torn", "edited"])
def test_a_damaged_tail_is_never_written_on(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "audit.jsonl"
    with GatewayAudit.open(path, "host:gw") as audit:
        audit.record("confirmation", reason="declined")
    text = path.read_text(encoding="utf-8")
    damaged = text[:-5] if damage == "torn" else text.replace("declined", "accepted")
    path.write_text(damaged, encoding="utf-8")
    with pytest.raises(GatewayAuditUnavailable):
        GatewayAudit.open(path, "host:gw")
    assert path.read_text(encoding="utf-8") == damaged


def test_concurrent_writers_in_one_process_keep_one_unbroken_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    # A burst above the 100 lines: every one is written (the bound: test_audit_bound.py).
    with GatewayAudit.open(path, "host:gw", AuditBound(burst=100)) as audit:

        def write() -> None:
            for _ in range(25):
                audit.record("confirmation", reason="accepted", caller=CALLER)

        threads = [threading.Thread(target=write) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert verify_audit(path) == 100


@pytest.mark.parametrize("edit", ["changed_value", "removed_line", "swapped_lines"])
def test_verification_names_the_first_line_an_edit_broke(tmp_path: Path, edit: str) -> None:
    path = tmp_path / "audit.jsonl"
    with GatewayAudit.open(path, "host:gw") as audit:
        for reason in ("accepted", "declined", "cancelled"):
            audit.record("confirmation", reason=reason)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if edit == "changed_value":
        lines[1] = lines[1].replace("declined", "accepted")
    elif edit == "removed_line":
        del lines[1]
    else:
        lines[1], lines[2] = lines[2], lines[1]
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(GatewayAuditInvalid) as caught:
        verify_audit(path)
    assert caught.value.line == 2
