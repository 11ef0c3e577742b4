"""Issue 3, host-only maintenance: the gaps left by tests/admin (see tests/RULES.md for the
rest) — mark_non_current end to end through policy, journal and audit, and that no
maintenance action is reachable over MCP."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engram_memory.admin.commands import AdminCommand
from engram_memory.admin.maintenance import MaintenanceService, Operator
from engram_memory.admin.names import RECORD_OPERATIONS
from engram_memory.contract.errors import ProtocolCode
from engram_memory.contract.exceptions import ProtocolRefusal, ToolError
from engram_memory.contract.schemas import TOOL_SPECS
from engram_memory.core.runtime import Services
from engram_memory.policy.decider import MAINTENANCE_PATH
from tests.harness import Caller, error_of, ok_value
from tests.rules.steps import GET, get_args, journal_operations
from tests.tools.test_tool_rules import accepted_record, high_water

DANA = Operator("acme", "support", "human:dana")  # read + maintain
ERIN = Operator("acme", "support", "human:erin")  # read only
SIX_TOOLS = {
    "engram_memory_search",
    "engram_memory_get",
    "engram_memory_capture",
    "engram_memory_request_admission",
    "engram_memory_withdraw",
    "engram_memory_forget",
}


def _audited(services: Services, tool: str) -> list[tuple[str, int]]:
    """(outcome, number of policy receipts from engram.maintenance) per audit entry of `tool`."""
    with services.database.transaction() as tx:
        rows = tx.fetchall(
            "SELECT a.outcome, count(r.decision_id) FILTER (WHERE r.policy_path = ?) "
            "FROM audit_entries a LEFT JOIN decision_receipts r ON r.audit_id = a.audit_id "
            "WHERE a.tool = ? GROUP BY a.sequence, a.outcome ORDER BY a.sequence",
            [MAINTENANCE_PATH, tool],
        )
    return [(str(outcome), int(count)) for outcome, count in rows]


def test_maintenance_mark_non_current_goes_through_policy_journal_and_audit(
    alice: Caller, services: Services
) -> None:
    admin = MaintenanceService(services)
    record_id = accepted_record(alice, "Soon no longer current.")
    cursor = high_water(services)

    with pytest.raises(ToolError) as refused:  # read authority is not enough
        admin.transition(ERIN, "mark_non_current", record_id, "reason:outdated")
    assert refused.value.code.name == "UNAUTHORIZED"
    assert high_water(services) == cursor

    done = admin.transition(DANA, "mark_non_current", record_id, "reason:outdated")
    assert (done["from_state"], done["to_state"]) == ("accepted_current", "historical")
    assert done["cursor"] == str(cursor + 1)
    assert journal_operations(services)[-1] == "mark_non_current"
    assert _audited(services, "admin:mark_non_current") == [("UNAUTHORIZED", 1), ("ok", 1)]
    assert error_of(alice.call(GET, get_args(alice, record_id))) == ("NOT_FOUND", False)

    # Without a successor, a rewind simply makes it current again.
    assert admin.transition(DANA, "rewind", record_id, "reason:still-valid")["to_state"] == (
        "accepted_current"
    )
    assert ok_value(alice.call(GET, get_args(alice, record_id)))


MAINTENANCE_NAMES = sorted(
    {*RECORD_OPERATIONS, "adjudicate", "expiry_sweep", "history", "inspect_candidate"}
    | {"rotate_scope_key", "rotate_root_key", "backup", "restore"}
)


@pytest.mark.parametrize("name", MAINTENANCE_NAMES)
def test_maintenance_is_never_reachable_over_mcp(alice: Caller, name: str) -> None:
    assert set(TOOL_SPECS) == SIX_TOOLS
    assert {spec.name for spec in alice.service.list_tools(alice.token())} == SIX_TOOLS
    for tool in (name, f"engram_memory_{name}", f"engram_memory_admin_{name}"):
        with pytest.raises(ProtocolRefusal) as refused:
            alice.call(tool, {"record_id": "mem_" + "a" * 52, "reason_ref": "reason:x"})
        assert refused.value.code is ProtocolCode.UNKNOWN_TOOL


def test_maintenance_code_is_not_even_loaded_by_the_mcp_server() -> None:
    probe = (
        "import sys, engram_memory.server.mcp_wiring; "
        "print(sorted(m for m in sys.modules if m.startswith('engram_memory.admin')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert loaded.stdout.strip() == "[]"
    assert AdminCommand.__module__.startswith("engram_memory.admin")  # the probe can fail
