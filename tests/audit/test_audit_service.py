"""The `audit-export` / `audit-verify` commands as the service runs them (admin/audit_service.py):
authority in every scope, a broken chain reported and audited, never exported."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.admin.audit_service import AuditAccessService, span_from_operands
from engram_memory.admin.maintenance import Operator
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ConfigurationError, ToolError
from engram_memory.core.runtime import Services
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record, capture

ERIN = Operator("acme", "support", "human:erin")  # read in acme/support only
DANA = Operator("acme", "support", "human:dana")


def _outcomes(services: Services, tool: str) -> list[str]:
    with services.database.reading() as tx:
        rows = tx.fetchall(
            "SELECT outcome FROM audit_entries WHERE tool = ? ORDER BY sequence", [tool]
        )
    return [str(row[0]) for row in rows]


def test_read_authority_is_needed_in_every_scope_the_store_holds(
    alice: Caller, services: Services, tmp_path: Path
) -> None:
    accepted_record(alice, "In acme.")
    access = AuditAccessService(services)
    assert "verified" in access.verify(ERIN, lambda _: None)
    capture(alice.as_(tenant="globex", workspace="main", principal="user:carol"), "In globex.")
    with pytest.raises(ToolError) as refused:
        access.export(ERIN, tmp_path / "out", span_from_operands("", ""), lambda _: None)
    assert refused.value.code is ErrorCode.UNAUTHORIZED
    assert not (tmp_path / "out").exists()
    assert _outcomes(services, "admin:audit_export") == ["UNAUTHORIZED"]


def test_a_broken_chain_is_reported_audited_and_never_exported(
    alice: Caller, services: Services, tmp_path: Path
) -> None:
    accepted_record(alice, "Then someone edits the trail.")
    with services.database.transaction() as tx:
        tx.execute("UPDATE audit_entries SET detail = 'edited' WHERE sequence = 1")
    access = AuditAccessService(services)
    verified = access.verify(DANA, lambda _: None)
    assert "AuditChainBroken" in str(verified["failure"])
    exported = access.export(DANA, tmp_path / "out", span_from_operands("", ""), lambda _: None)
    assert "failure" in exported
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert _outcomes(services, "admin:audit_verify") == [ErrorCode.JOURNAL_CORRUPT.name]
    assert _outcomes(services, "admin:audit_export") == [ErrorCode.JOURNAL_CORRUPT.name]


def test_a_relative_previous_export_or_a_malformed_sequence_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        span_from_operands("relative/dir", "")()
    with pytest.raises(ConfigurationError):
        span_from_operands("", "12x")()
