"""Issue 3, rule 3 — lifecycle (SPEC §8) as the agent tools see it.

The transition table itself is checked pair by pair in tests/contract/test_lifecycle_table.py
and through host maintenance in tests/admin/test_maintenance.py (see tests/RULES.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from engram_memory.admin.maintenance import MaintenanceService, Operator
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.digests import record_id_for
from engram_memory.contract.types import format_instant
from engram_memory.core.runtime import Services
from tests.harness import Caller, error_of, fresh_key, ok_value
from tests.rules.steps import (
    ADMIT,
    CAPTURE,
    GET,
    SEARCH,
    Clock,
    ClockedCaller,
    count_rows,
    get_args,
    journal_operations,
    search_ids,
)
from tests.tools.test_tool_rules import (
    accepted_record,
    admit,
    capture,
    forget,
    high_water,
    withdraw,
)

DANA = Operator("acme", "support", "human:dana")


def _canary() -> str:
    return f"canary{uuid.uuid4().hex[:12]}"


def _rejected(alice: Caller, text: str) -> str:
    candidate_id = capture(alice, text, evidence_ref="evidence:untrusted/1")["candidate_id"]
    assert ok_value(admit(alice, candidate_id))["outcome"]["status"] == "rejected"
    return str(candidate_id)


def _withdrawn(alice: Caller, text: str) -> str:
    candidate_id = capture(alice, text)["candidate_id"]
    assert ok_value(withdraw(alice, candidate_id))["receipt"]["to_state"] == "withdrawn"
    return str(candidate_id)


@pytest.mark.parametrize("state", ["rejected", "withdrawn"])
def test_lifecycle_withdraw_only_from_pending_else_already_terminal(
    alice: Caller, services: Services, state: str
) -> None:
    candidate_id = (_rejected if state == "rejected" else _withdrawn)(alice, "Decided.")
    cursor, stored = high_water(services), count_rows(services, "idempotency")
    assert error_of(withdraw(alice, candidate_id)) == ("ALREADY_TERMINAL", False)
    # Refused before any cursor is allocated and before a result is bound to the key.
    assert (high_water(services), count_rows(services, "idempotency")) == (cursor, stored)


def test_lifecycle_withdraw_from_pending_including_pending_adjudication(alice: Caller) -> None:
    held = capture(alice, "Needs a human.", evidence_ref="evidence:email/1")["candidate_id"]
    assert ok_value(admit(alice, held))["outcome"]["status"] == "pending_adjudication"
    receipt = ok_value(withdraw(alice, held))["receipt"]
    assert (receipt["from_state"], receipt["to_state"]) == ("pending", "withdrawn")
    # A withdrawn candidate is terminal and gone for admission.
    assert error_of(admit(alice, held)) == ("NOT_FOUND", False)


def _state_maker(state: str) -> Callable[[Caller, MaintenanceService, str], str]:
    """Builds a target in `state` holding `text`; returns the record id reads would use."""

    def candidate(alice: Caller, _admin: MaintenanceService, text: str) -> str:
        if state == "rejected":
            args = demo_capture_arguments(text, fresh_key(), evidence_ref="evidence:untrusted/2")
        elif state == "pending_adjudication":
            args = demo_capture_arguments(text, fresh_key(), evidence_ref="evidence:email/2")
        else:
            args = demo_capture_arguments(text, fresh_key())
        captured = ok_value(alice.call(CAPTURE, args))
        if state in ("rejected", "pending_adjudication"):
            ok_value(admit(alice, captured["candidate_id"]))
        if state == "withdrawn":
            ok_value(withdraw(alice, captured["candidate_id"]))
        # The id the record would get if accepted: reads must not know it yet.
        return record_id_for(str(captured["record_digest"]))

    def record(alice: Caller, admin: MaintenanceService, text: str) -> str:
        record_id = accepted_record(alice, text)
        if state == "tombstoned":
            ok_value(forget(alice, record_id))
        elif state != "accepted_current":
            operation = {
                "accepted_disputed": "dispute",
                "historical": "mark_non_current",
                "expired": "expire",
                "trust_invalid": "trust_invalidate",
            }[state]
            assert admin.transition(DANA, operation, record_id, "reason:x")["to_state"] == state
        return record_id

    candidate_states = ("pending", "pending_adjudication", "rejected", "withdrawn")
    return candidate if state in candidate_states else record


READ_STATES = [
    "pending",
    "pending_adjudication",
    "rejected",
    "withdrawn",
    "accepted_current",
    "accepted_disputed",
    "historical",
    "expired",
    "trust_invalid",
    "tombstoned",
]


@pytest.mark.parametrize("state", READ_STATES)
def test_lifecycle_search_and_get_disclose_accepted_current_only(
    alice: Caller, services: Services, state: str
) -> None:
    canary = _canary()
    record_id = _state_maker(state)(alice, MaintenanceService(services), f"Note {canary}.")
    got = alice.call(GET, get_args(alice, record_id))
    found = search_ids(alice, canary)
    if state == "accepted_current":
        assert ok_value(got)["record"]["record_id"] == record_id
        assert found == [record_id]
    else:
        assert error_of(got) == ("NOT_FOUND", False)
        assert found == []


def test_lifecycle_tombstone_is_terminal_and_dominant_over_replays(
    alice: Caller, services: Services
) -> None:
    canary = _canary()
    capture_args = demo_capture_arguments(f"Forgotten {canary}.", fresh_key("c"))
    captured = ok_value(alice.call(CAPTURE, capture_args))
    admit_args = {"candidate_id": captured["candidate_id"], "idempotency_key": fresh_key("a")}
    record_id = ok_value(alice.call(ADMIT, admit_args))["outcome"]["record_id"]
    forget_key = fresh_key("f")
    ok_value(forget(alice, record_id, forget_key))

    # Replays of every step of its life answer from storage; none brings the record back.
    assert ok_value(alice.call(CAPTURE, capture_args))["status"] == "duplicate_exact"
    assert ok_value(alice.call(ADMIT, admit_args))["replayed"] is True
    assert ok_value(forget(alice, record_id, forget_key))["replayed"] is True
    assert error_of(admit(alice, captured["candidate_id"])) == ("NOT_FOUND", False)
    assert error_of(forget(alice, record_id)) == ("ALREADY_TERMINAL", False)
    assert error_of(alice.call(GET, get_args(alice, record_id))) == ("NOT_FOUND", False)
    assert search_ids(alice, canary) == []
    assert journal_operations(services) == ["capture", "accept", "tombstone"]


def _valid_from(caller: Caller, text: str, t: int, t_end: int | None = None) -> dict[str, Any]:
    args = demo_capture_arguments(text, fresh_key())
    args["payload"]["valid_time"] = {"t": t} if t_end is None else {"t": t, "t_end": t_end}
    return args


def test_lifecycle_reads_honour_dual_as_of_valid_time(
    timed_alice: ClockedCaller, clock: Clock
) -> None:
    now, canary = clock.now_ms, _canary()

    def accept(text: str, t: int, t_end: int | None = None) -> str:
        captured = ok_value(timed_alice.call(CAPTURE, _valid_from(timed_alice, text, t, t_end)))
        outcome = ok_value(admit(timed_alice, captured["candidate_id"]))["outcome"]
        return str(outcome["record_id"])

    future = accept(f"Future {canary}.", now + 60_000)
    ended = accept(f"Ended {canary}.", now - 60_000, now - 1)
    ends_now = accept(f"Ends now {canary}.", now - 60_000, now)
    starts_now = accept(f"Starts now {canary}.", now)

    def visible() -> set[str]:
        ids = {
            rid
            for rid in (future, ended, ends_now, starts_now)
            if timed_alice.call(GET, get_args(timed_alice, rid))["ok"]
        }
        assert set(search_ids(timed_alice, canary)) == ids  # search and get agree
        return ids

    assert visible() == {ends_now, starts_now}  # t <= valid_as_of <= t_end, inclusive
    clock.advance(60_000)
    assert visible() == {future, starts_now}


def test_lifecycle_search_pins_system_as_of_across_pages(alice: Caller) -> None:
    canary = _canary()
    first_two = {accepted_record(alice, f"Parcel {canary} number {i}.") for i in range(2)}
    args = {"query": canary, "purpose_ref": alice.purpose_ref, "limit": 1}
    page1 = ok_value(alice.call(SEARCH, args))
    later = accepted_record(alice, f"Parcel {canary} accepted after page one.")

    page2 = ok_value(alice.call(SEARCH, {**args, "page_cursor": page1["next_page_cursor"]}))
    seen = [p["record"]["record_id"] for p in page1["records"] + page2["records"]]
    assert set(seen) == first_two  # the later record is beyond the pinned system_as_of
    assert [p["rank"] for p in page2["records"]] == [2]
    assert "next_page_cursor" not in page2
    assert later in search_ids(alice, canary)  # a new search sees it


def test_lifecycle_reads_honour_expires_at_before_any_expire_event(
    timed_alice: ClockedCaller, clock: Clock, services: Services
) -> None:
    canary = _canary()
    expires_at = clock.now_ms + 10_000
    args = demo_capture_arguments(f"Short lived {canary}.", fresh_key())
    args["payload"]["retention"] = {
        "derivative_rule": "make-ineligible",
        "expires_at": format_instant(expires_at),
    }
    captured = ok_value(timed_alice.call(CAPTURE, args))
    record_id = ok_value(admit(timed_alice, captured["candidate_id"]))["outcome"]["record_id"]

    clock.now_ms = expires_at - 1
    assert ok_value(timed_alice.call(GET, get_args(timed_alice, record_id)))
    assert search_ids(timed_alice, canary) == [record_id]
    clock.now_ms = expires_at  # visible only while now < expires_at
    assert error_of(timed_alice.call(GET, get_args(timed_alice, record_id))) == ("NOT_FOUND", False)
    assert search_ids(timed_alice, canary) == []
    assert "expire" not in journal_operations(services)
