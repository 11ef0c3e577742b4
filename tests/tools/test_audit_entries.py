"""Each call's one audit entry: its outcome, its targets, and the receipts of exactly the
decisions the call made, in the order it made them — allowed, replayed, refused or failed
midway, agent tools and host maintenance alike (SPEC/DESIGN "Audit")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engram_memory.admin.maintenance import MaintenanceService, Operator
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.exceptions import ProtocolRefusal, ToolError
from engram_memory.core.runtime import Services
from tests.harness import Caller, fresh_key
from tests.tools.test_tool_rules import ADMIT, CAPTURE, FORGET, WITHDRAW, code, value

DANA = Operator("acme", "support", "human:dana")  # read + maintain
ERIN = Operator("acme", "support", "human:erin")  # read only

Shape = tuple[str, str, tuple[str, ...], tuple[str, ...], bool, bool]


def _entries(services: Services) -> list[Shape]:
    """(tool, outcome, targets, decisions, has key digest, has detail) of every entry, in
    order; ids are named by first appearance, decisions by their policy package."""
    with services.database.reading() as tx:
        rows = tx.fetchall(
            "SELECT tool, outcome, target_ids_json, receipt_digests_json,"
            " idempotency_key_digest, detail FROM audit_entries ORDER BY sequence"
        )
        paths = dict(tx.fetchall("SELECT receipt_digest, policy_path FROM decision_receipts"))
    names: dict[str, str] = {}
    shapes: list[Shape] = []
    for tool, outcome, targets, receipts, key_digest, detail in rows:
        ids = tuple(names.setdefault(t, f"id{len(names) + 1}") for t in json.loads(targets))
        decided = tuple(str(paths[r]).split("/")[1] for r in json.loads(receipts))
        shapes.append((tool, outcome, ids, decided, key_digest != "", detail != ""))
    return shapes


def _withdraw_args(candidate_id: str) -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": fresh_key(), "reason_ref": "r:x"}


def test_every_agent_outcome_leaves_one_entry_with_the_receipts_of_its_decisions(
    alice: Caller, services: Services
) -> None:
    args = demo_capture_arguments("Refund approved.", fresh_key())
    candidate_id = value(alice.call(CAPTURE, args))["candidate_id"]
    assert value(alice.call(CAPTURE, args))["status"] == "duplicate_exact"
    admitted = {"candidate_id": candidate_id, "idempotency_key": fresh_key()}
    record_id = value(alice.call(ADMIT, admitted))["outcome"]["record_id"]
    value(
        alice.call("engram_memory_get", {"record_id": record_id, "purpose_ref": alice.purpose_ref})
    )
    value(alice.call("engram_memory_search", {"query": "refund", "purpose_ref": alice.purpose_ref}))
    missing = {"record_id": "mem_unknown", "purpose_ref": alice.purpose_ref}
    assert code(alice.call("engram_memory_get", missing)) == "NOT_FOUND"
    malformed = {"record_id": "not-an-id", "purpose_ref": alice.purpose_ref}
    assert code(alice.call("engram_memory_get", malformed)) == "INVALID_SCHEMA"
    unconsented = demo_capture_arguments("Family.", fresh_key())
    unconsented["payload"]["reconciliation"] = {"family_refs": ["family:unconsented"]}
    assert code(alice.call(CAPTURE, unconsented)) == "UNAUTHORIZED"
    pending = value(alice.call(CAPTURE, demo_capture_arguments("Pending.", fresh_key())))
    with pytest.raises(ProtocolRefusal):
        alice.call(WITHDRAW, _withdraw_args(pending["candidate_id"]))
    forgotten = {"record_id": record_id, "idempotency_key": fresh_key(), "reason_ref": "r:x"}
    value(alice.call(FORGET, forgotten, alice.confirm(FORGET, forgotten, record_id)))

    full = ("discovery", "confirmation", "authz", "retention", "reconciliation")
    assert _entries(services) == [
        (CAPTURE, "ok", ("id1",), full, True, False),
        (CAPTURE, "ok", ("id1",), ("discovery", "confirmation", "authz"), True, False),
        (
            ADMIT,
            "ok",
            ("id1", "id2"),
            ("discovery", "confirmation", "authz", "admission"),
            True,
            False,
        ),
        ("engram_memory_get", "ok", ("id2",), ("discovery", "authz"), False, False),
        ("engram_memory_search", "ok", ("id2",), ("discovery", "authz"), False, False),
        ("engram_memory_get", "NOT_FOUND", ("id3",), ("discovery", "authz"), False, True),
        ("engram_memory_get", "INVALID_SCHEMA", (), ("discovery",), False, True),
        (CAPTURE, "UNAUTHORIZED", (), full, True, True),
        (CAPTURE, "ok", ("id4",), full, True, False),
        (WITHDRAW, "rpc:-32603", ("id4",), ("discovery", "confirmation"), False, True),
        # Two confirmation decisions: the requirement, then the approval (four-eyes, issue 22).
        (
            FORGET,
            "ok",
            ("id2",),
            ("discovery", "confirmation", "confirmation", "authz"),
            True,
            False,
        ),
    ]


def test_every_maintenance_outcome_leaves_one_entry_with_the_receipts_of_its_decisions(
    alice: Caller, services: Services
) -> None:
    admin = MaintenanceService(services)
    args = demo_capture_arguments("Refund approved.", fresh_key())
    candidate_id = value(alice.call(CAPTURE, args))["candidate_id"]
    with pytest.raises(ToolError):
        admin.adjudicate(ERIN, candidate_id, "accept", "reason:x")
    record_id = str(admin.adjudicate(DANA, candidate_id, "accept", "reason:x")["record_id"])
    admin.history(ERIN, record_id)
    with pytest.raises(ToolError):
        admin.transition(DANA, "resolve_dispute", record_id, "reason:x")
    admin.transition(DANA, "dispute", record_id, "reason:x")

    entries = [e for e in _entries(services) if e[0].startswith("admin:")]
    maintenance = ("maintenance",)
    assert entries == [
        ("admin:adjudicate", "UNAUTHORIZED", (), maintenance, False, True),
        ("admin:adjudicate", "ok", ("id1", "id2"), maintenance, False, False),
        ("admin:history", "ok", ("id2",), maintenance, False, False),
        ("admin:resolve_dispute", "ILLEGAL_TRANSITION", ("id2",), maintenance, False, True),
        ("admin:dispute", "ok", ("id2",), maintenance, False, False),
    ]
