"""Issue 9 item 4: the confirmation that released a call is evidence. Its approver, jti, iat,
resolved_at and operation digest land in the call's audit entry and journal event, inside
both hashes; calls without a confirmation keep exactly the entries and events they had."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.digests import operation_digest
from engram_memory.contract.exceptions import AuditChainBroken
from engram_memory.contract.parsing import normalize
from engram_memory.core.runtime import Services
from engram_memory.store import audit, journal
from engram_memory.tools.dispatch import CallRequest
from tests.harness import Caller
from tests.tools.test_tool_rules import _key, accepted_record, capture, code, value

SCOPE = "tenant:acme/workspace:support"
FORGET = "engram_memory_forget"
CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
APPROVAL_COLUMNS = (
    "approver",
    "confirmation_jti",
    "confirmation_issued_at",
    "confirmation_resolved_at",
    "confirmation_op_digest",
)


def _forget_args(record_id: str) -> dict[str, Any]:
    return {"record_id": record_id, "idempotency_key": _key(), "reason_ref": "reason:r"}


def _entries(services: Services, tool: str) -> list[dict[str, Any]]:
    columns = ", ".join(("outcome", *APPROVAL_COLUMNS))
    with services.database.reading() as tx:
        rows = tx.fetchall(
            f"SELECT {columns} FROM audit_entries WHERE tool = ? ORDER BY sequence",  # noqa: S608
            [tool],
        )
    return [dict(zip(("outcome", *APPROVAL_COLUMNS), row, strict=True)) for row in rows]


def _event(services: Services, event_id: str) -> dict[str, Any]:
    with services.database.reading() as tx:
        row = tx.fetchone("SELECT event_json FROM journal_events WHERE event_id = ?", [event_id])
    assert row is not None
    body: dict[str, Any] = json.loads(row[0])
    return body


def _verified(services: Services) -> None:
    with services.database.transaction() as tx:
        audit.verify(tx)
        journal.verify_scope(tx, SCOPE)


def test_a_forget_records_who_approved_it_in_its_audit_entry_and_journal_event(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice)
    args = _forget_args(record_id)
    token = alice.confirm(FORGET, args, record_id, approver="human:dana", jti="jti-dana")
    value(alice.call(FORGET, args, token))
    (entry,) = _entries(services, FORGET)
    op = operation_digest(FORGET, normalize(args))
    assert entry["outcome"] == "ok"
    assert (entry["approver"], entry["confirmation_jti"], entry["confirmation_op_digest"]) == (
        "human:dana",
        "jti-dana",
        op,
    )
    assert entry["confirmation_issued_at"] <= entry["confirmation_resolved_at"]
    approval = _event(services, f"tombstone:{record_id}")["approval"]
    assert approval == {
        "approver": "human:dana",
        "jti": "jti-dana",
        "issued_at": entry["confirmation_issued_at"],
        "resolved_at": entry["confirmation_resolved_at"],
        "op_digest": op,
    }
    _verified(services)


def test_an_unconfirmed_call_has_no_approval_in_its_entry_or_event(
    alice: Caller, services: Services
) -> None:
    candidate_id = capture(alice)["candidate_id"]
    (entry,) = _entries(services, "engram_memory_capture")
    assert all(entry[column] is None for column in APPROVAL_COLUMNS)
    assert "approval" not in _event(services, f"capture:{candidate_id}")


def test_a_confirmation_spent_by_a_refused_call_still_names_its_approver(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice)
    first = _forget_args(record_id)
    value(alice.call(FORGET, first, alice.confirm(FORGET, first, record_id)))
    again = _forget_args(record_id)
    refused = alice.call(FORGET, again, alice.confirm(FORGET, again, record_id, jti="jti-late"))
    assert code(refused) == "ALREADY_TERMINAL"
    late = _entries(services, FORGET)[-1]
    assert (late["outcome"], late["approver"], late["confirmation_jti"]) == (
        "ALREADY_TERMINAL",
        "human:tester",
        "jti-late",
    )
    _verified(services)


def test_a_reused_confirmation_is_gate_failed_and_names_no_approver(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice)
    args = _forget_args(record_id)
    token = alice.confirm(FORGET, args, record_id)
    value(alice.call(FORGET, args, token))
    assert code(alice.call(FORGET, args, token)) == "gate_failed"
    reused = _entries(services, FORGET)[-1]
    assert reused["outcome"] == "gate_failed"
    assert reused["approver"] is None


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE audit_entries SET approver = 'human:mallory' WHERE approver IS NOT NULL",
        "UPDATE audit_entries SET approver = NULL",  # erased, the rest kept
        "UPDATE audit_entries SET confirmation_resolved_at = NULL",
        "UPDATE audit_entries SET approver = 'human:mallory' WHERE approver IS NULL",  # added
    ],
)
def test_an_edited_approval_breaks_the_audit_chain(
    alice: Caller, services: Services, tamper: str
) -> None:
    record_id = accepted_record(alice)
    args = _forget_args(record_id)
    value(alice.call(FORGET, args, alice.confirm(FORGET, args, record_id)))
    with services.database.transaction() as tx:
        tx.execute(tamper)
    with pytest.raises(AuditChainBroken), services.database.transaction() as tx:
        audit.verify(tx)


def test_a_call_request_with_a_padded_approver_changes_nothing(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice)
    args = _forget_args(record_id)
    with services.database.reading() as tx:
        before = journal.head(tx, SCOPE)
    token = alice.confirm(FORGET, args, record_id, approver="human:dana ")
    envelope = alice.service.call_tool(CallRequest(FORGET, args, alice.token(), token))
    assert code(envelope) == "gate_failed"
    with services.database.reading() as tx:
        assert journal.head(tx, SCOPE) == before
    assert _entries(services, FORGET)[-1]["approver"] is None


def test_a_confirmed_capture_and_admission_carry_their_approvers_in_their_events(
    alice: Caller, services: Services
) -> None:
    dave = alice.as_(principal="user:dave")  # acme: dave's captures and admissions confirmed
    args = demo_capture_arguments("Proposed by a contributor.", _key())
    op = operation_digest(CAPTURE, normalize(args))
    token = dave.confirm(CAPTURE, args, op, approver="human:erin")
    candidate_id = value(dave.call(CAPTURE, args, token))["candidate_id"]
    admit_args = {"candidate_id": candidate_id, "idempotency_key": _key()}
    confirmed = dave.confirm(ADMIT, admit_args, candidate_id, approver="human:frank")
    assert value(dave.call(ADMIT, admit_args, confirmed))["outcome"]["status"] == "accepted"
    assert _event(services, f"capture:{candidate_id}")["approval"]["approver"] == "human:erin"
    admission = _event(services, f"admission:{candidate_id}")["approval"]
    assert admission["approver"] == "human:frank"
    assert [entry["approver"] for entry in _entries(services, CAPTURE)] == ["human:erin"]
    assert [entry["approver"] for entry in _entries(services, ADMIT)] == ["human:frank"]
    _verified(services)
