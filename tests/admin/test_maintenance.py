"""Host-only maintenance: authorized by policy, checked by the lifecycle table, journaled."""

from __future__ import annotations

from typing import Any

import pytest

from engram_memory.admin.maintenance import MaintenanceService, Operator
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.exceptions import StoreUnavailable, ToolError
from engram_memory.core.runtime import Services
from engram_memory.store import memory
from tests.harness import Caller
from tests.tools.test_tool_rules import (
    _key,
    accepted_record,
    admit,
    capture,
    code,
    forget,
    high_water,
    value,
)

DANA = Operator("acme", "support", "human:dana")  # read + maintain
ERIN = Operator("acme", "support", "human:erin")  # read only


@pytest.fixture
def admin(services: Services) -> MaintenanceService:
    return MaintenanceService(services)


def _refused(call: Any) -> str:
    with pytest.raises(ToolError) as refused:
        call()
    return refused.value.code.name


def _get(caller: Caller, record_id: str) -> dict[str, Any]:
    return caller.call(
        "engram_memory_get", {"record_id": record_id, "purpose_ref": caller.purpose_ref}
    )


def test_guard_held_candidate_is_accepted_by_a_named_human(
    alice: Caller, admin: MaintenanceService
) -> None:
    args = demo_capture_arguments("Forgotten, then re-proposed.", _key())
    first = value(admit(alice, value(alice.call("engram_memory_capture", args))["candidate_id"]))
    value(forget(alice, first["outcome"]["record_id"]))
    again = value(alice.call("engram_memory_capture", {**args, "idempotency_key": _key()}))
    assert value(admit(alice, again["candidate_id"]))["outcome"]["status"] == "pending_adjudication"
    decided = admin.adjudicate(DANA, again["candidate_id"], "accept", "reason:reviewed")
    assert decided["status"] == "accepted"
    assert value(_get(alice, str(decided["record_id"])))


def test_adjudication_rejects_and_is_final(alice: Caller, admin: MaintenanceService) -> None:
    candidate_id = capture(alice, "Held.", evidence_ref="evidence:review/1")["candidate_id"]
    assert admin.adjudicate(DANA, candidate_id, "reject", "reason:wrong")["status"] == "rejected"
    assert (
        _refused(lambda: admin.adjudicate(DANA, candidate_id, "accept", "reason:x"))
        == "ALREADY_TERMINAL"
    )


def test_read_authority_cannot_change_anything(
    alice: Caller, admin: MaintenanceService, services: Services
) -> None:
    record_id = accepted_record(alice)
    cursor = high_water(services)
    assert (
        _refused(lambda: admin.transition(ERIN, "dispute", record_id, "reason:x")) == "UNAUTHORIZED"
    )
    assert high_water(services) == cursor
    assert admin.history(ERIN, record_id)["events"]


def test_operator_of_another_tenant_is_unauthorized(
    alice: Caller, admin: MaintenanceService
) -> None:
    record_id = accepted_record(alice)
    gina_here = Operator("acme", "support", "human:gina")
    assert (
        _refused(lambda: admin.transition(gina_here, "dispute", record_id, "reason:x"))
        == "UNAUTHORIZED"
    )


def test_dispute_hides_the_record_and_resolve_restores_it(
    alice: Caller, admin: MaintenanceService
) -> None:
    record_id = accepted_record(alice)
    assert (
        admin.transition(DANA, "dispute", record_id, "reason:contested")["to_state"]
        == "accepted_disputed"
    )
    assert code(_get(alice, record_id)) == "NOT_FOUND"
    assert (
        admin.transition(DANA, "resolve_dispute", record_id, "reason:ok")["to_state"]
        == "accepted_current"
    )
    assert value(_get(alice, record_id))


def test_supersede_needs_a_distinct_accepted_current_successor(
    alice: Caller, admin: MaintenanceService
) -> None:
    old, new = accepted_record(alice, "Old policy."), accepted_record(alice, "New policy.")
    assert (
        _refused(lambda: admin.transition(DANA, "supersede", old, "reason:x", old)) == "NOT_FOUND"
    )
    admin.transition(DANA, "dispute", new, "reason:x")
    assert (
        _refused(lambda: admin.transition(DANA, "supersede", old, "reason:x", new))
        == "ILLEGAL_TRANSITION"
    )


def test_rewind_restores_the_superseded_record_and_demotes_its_successor(
    alice: Caller, admin: MaintenanceService
) -> None:
    old, new = accepted_record(alice, "Old fact."), accepted_record(alice, "New fact.")
    assert admin.transition(DANA, "supersede", old, "reason:newer", new)["to_state"] == "historical"
    assert code(_get(alice, old)) == "NOT_FOUND"
    assert (
        admin.transition(DANA, "rewind", old, "reason:newer-was-wrong")["to_state"]
        == "accepted_current"
    )
    assert value(_get(alice, old))
    assert code(_get(alice, new)) == "NOT_FOUND"


def test_illegal_transition_is_refused_before_a_cursor_is_allocated(
    alice: Caller, admin: MaintenanceService, services: Services
) -> None:
    record_id = accepted_record(alice)
    cursor = high_water(services)
    assert (
        _refused(lambda: admin.transition(DANA, "resolve_dispute", record_id, "reason:x"))
        == "ILLEGAL_TRANSITION"
    )
    assert (
        _refused(lambda: admin.transition(DANA, "rewind", record_id, "reason:x"))
        == "ILLEGAL_TRANSITION"
    )
    assert high_water(services) == cursor


def test_tombstone_is_terminal_and_dominant(alice: Caller, admin: MaintenanceService) -> None:
    record_id = accepted_record(alice)
    value(forget(alice, record_id))
    for operation in ("dispute", "rewind", "expire", "trust_invalidate", "mark_non_current"):
        assert (
            _refused(lambda op=operation: admin.transition(DANA, op, record_id, "reason:x"))
            == "ALREADY_TERMINAL"
        )


def test_trust_invalidated_record_is_never_disclosed_but_can_be_forgotten(
    alice: Caller, admin: MaintenanceService
) -> None:
    record_id = accepted_record(alice, "Evidence later revoked.")
    admin.transition(DANA, "trust_invalidate", record_id, "reason:revoked")
    assert code(_get(alice, record_id)) == "NOT_FOUND"
    forgotten = value(forget(alice, record_id))
    assert forgotten["receipt"]["from_state"] == "trust_invalid"


def test_expiry_sweep_journals_expire_for_records_past_their_expiry(
    alice: Caller, admin: MaintenanceService, services: Services
) -> None:
    record_id = accepted_record(alice, "Expires in 90 days.")
    services.clock_ms = lambda: 4_102_444_800_000  # 2100: long past the default TTL
    assert admin.expiry_sweep(DANA, lambda _line: None) == {"expired": 1}
    events = admin.history(DANA, record_id)["events"]
    assert [e["operation"] for e in events] == ["capture", "accept", "expire"]
    assert admin.expiry_sweep(DANA, lambda _line: None) == {"expired": 0}


def test_candidate_inspection_shows_content_only_on_request(
    alice: Caller, admin: MaintenanceService
) -> None:
    candidate_id = capture(alice, "Sensitive but pending.", evidence_ref="evidence:review/2")[
        "candidate_id"
    ]
    plain = admin.inspect_candidate(ERIN, candidate_id)
    assert plain["state"] == "pending"
    assert "Sensitive" not in str(plain)
    opened = admin.inspect_candidate(ERIN, candidate_id, show_content=True)
    assert "Sensitive but pending." in str(opened["envelope"])


def test_every_maintenance_outcome_is_audited(
    alice: Caller, admin: MaintenanceService, services: Services
) -> None:
    record_id = accepted_record(alice)
    admin.transition(DANA, "dispute", record_id, "reason:x")
    _refused(lambda: admin.transition(ERIN, "resolve_dispute", record_id, "reason:x"))
    with services.database.transaction() as tx:
        rows = tx.fetchall(
            "SELECT tool, outcome FROM audit_entries WHERE tool LIKE 'admin:%' ORDER BY sequence"
        )
    assert rows == [("admin:dispute", "ok"), ("admin:resolve_dispute", "UNAUTHORIZED")]


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (StoreUnavailable("disk gone"), "STORE_UNAVAILABLE"),
        (RuntimeError("SELECT secret FROM records"), "CAPABILITY_UNAVAILABLE"),
    ],
    ids=["known", "unknown"],
)
def test_lower_layer_failures_get_the_contract_code_agents_would_get(
    alice: Caller,
    admin: MaintenanceService,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    failure: Exception,
    expected: str,
) -> None:
    record_id = accepted_record(alice)

    def broken(*_args: object) -> None:
        raise failure

    monkeypatch.setattr(memory, "get_record", broken)
    with pytest.raises(ToolError) as refused:
        admin.transition(DANA, "dispute", record_id, "reason:x")
    assert refused.value.code.name == expected
    assert "secret" not in refused.value.detail  # the type only, never the text
    monkeypatch.undo()
    with services.database.transaction() as tx:
        rows = tx.fetchall("SELECT tool, outcome FROM audit_entries WHERE tool LIKE 'admin:%'")
    assert rows == [("admin:dispute", expected)]
    assert value(_get(alice, record_id))  # unchanged: still disclosed


@pytest.mark.parametrize(
    "call",
    [
        lambda admin, record: admin.adjudicate(DANA, record, "maybe", "reason:x"),
        lambda admin, record: admin.transition(DANA, "supersede", record, "reason:x"),
        lambda admin, record: admin.transition(DANA, "dispute", record, "reason:x", record),
        lambda admin, record: admin.transition(DANA, "erase", record, "reason:x"),
    ],
    ids=["bad-decision", "supersede-without-successor", "successor-elsewhere", "unknown-op"],
)
def test_invalid_maintenance_arguments_are_refused_and_audited(
    alice: Caller, admin: MaintenanceService, services: Services, call: Any
) -> None:
    record_id = accepted_record(alice)
    assert _refused(lambda: call(admin, record_id)) == "INVALID_SCHEMA"
    with services.database.transaction() as tx:
        rows = tx.fetchall("SELECT outcome FROM audit_entries WHERE tool LIKE 'admin:%'")
    assert rows == [("INVALID_SCHEMA",)]
