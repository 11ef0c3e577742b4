"""Contract rules at the tool level: idempotency, gate, lifecycle, retention, consent, guard."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.contract.errors import ProtocolCode
from engram_memory.contract.exceptions import ProtocolRefusal
from engram_memory.contract.types import format_instant
from engram_memory.core.runtime import Services
from engram_memory.store import journal
from tests.harness import Caller

FORGET = "engram_memory_forget"
WITHDRAW = "engram_memory_withdraw"
ADMIT = "engram_memory_request_admission"
CAPTURE = "engram_memory_capture"


def _key() -> str:
    return f"key-{uuid.uuid4().hex}"


def value(envelope: dict[str, Any]) -> dict[str, Any]:
    assert envelope["ok"] is True, envelope
    result: dict[str, Any] = envelope["output"]["value"]
    return result


def code(envelope: dict[str, Any]) -> str:
    assert envelope["ok"] is False, envelope
    error: str = envelope["error"]["code"]
    return error


def capture(caller: Caller, text: str = "Refund approved.", **kwargs: Any) -> dict[str, Any]:
    return value(caller.call(CAPTURE, demo_capture_arguments(text, _key(), **kwargs)))


def admit(caller: Caller, candidate_id: str, key: str | None = None) -> dict[str, Any]:
    return caller.call(ADMIT, {"candidate_id": candidate_id, "idempotency_key": key or _key()})


def accepted_record(caller: Caller, text: str = "Refund approved.") -> str:
    outcome = value(admit(caller, capture(caller, text)["candidate_id"]))["outcome"]
    assert outcome["status"] == "accepted"
    record_id: str = outcome["record_id"]
    return record_id


def forget(
    caller: Caller, record_id: str, key: str | None = None, **confirm: Any
) -> dict[str, Any]:
    args = {"record_id": record_id, "idempotency_key": key or _key(), "reason_ref": "reason:r"}
    return caller.call(FORGET, args, caller.confirm(FORGET, args, record_id, **confirm))


def withdraw(caller: Caller, candidate_id: str, key: str | None = None) -> dict[str, Any]:
    args = {
        "candidate_id": candidate_id,
        "idempotency_key": key or _key(),
        "reason_ref": "reason:r",
    }
    return caller.call(WITHDRAW, args, caller.confirm(WITHDRAW, args, candidate_id))


def high_water(services: Services, scope: str = "tenant:acme/workspace:support") -> int:
    with services.database.transaction() as tx:
        return journal.head(tx, scope)[0]


def test_admission_replay_returns_the_stored_outcome_marked_replayed(alice: Caller) -> None:
    candidate_id = capture(alice)["candidate_id"]
    key = _key()
    first = value(admit(alice, candidate_id, key))
    again = value(admit(alice, candidate_id, key))
    assert first["replayed"] is False
    assert again == {**first, "replayed": True}


def test_admission_key_reused_for_another_candidate_conflicts(alice: Caller) -> None:
    key = _key()
    value(admit(alice, capture(alice)["candidate_id"], key))
    assert code(admit(alice, capture(alice, "Other.")["candidate_id"], key)) == "DIGEST_CONFLICT"


def test_forget_replay_needs_a_fresh_confirmation_and_replays(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice)
    key = _key()
    first = value(forget(alice, record_id, key))
    cursor = high_water(services)
    again = value(forget(alice, record_id, key))
    assert again == {**first, "replayed": True}
    assert high_water(services) == cursor


def test_forget_key_reused_for_another_record_conflicts(alice: Caller) -> None:
    key = _key()
    value(forget(alice, accepted_record(alice, "First."), key))
    assert code(forget(alice, accepted_record(alice, "Second."), key)) == "DIGEST_CONFLICT"


def test_withdraw_replay_and_conflict(alice: Caller) -> None:
    key = _key()
    candidate_id = capture(alice)["candidate_id"]
    first = value(withdraw(alice, candidate_id, key))
    assert value(withdraw(alice, candidate_id, key)) == {**first, "replayed": True}
    assert code(withdraw(alice, capture(alice, "Other.")["candidate_id"], key)) == "DIGEST_CONFLICT"


def test_withdraw_after_acceptance_is_already_terminal(alice: Caller) -> None:
    candidate_id = capture(alice)["candidate_id"]
    value(admit(alice, candidate_id))
    assert code(withdraw(alice, candidate_id)) == "ALREADY_TERMINAL"


def test_forget_of_a_tombstoned_record_is_already_terminal(alice: Caller) -> None:
    record_id = accepted_record(alice)
    value(forget(alice, record_id))
    assert code(forget(alice, record_id)) == "ALREADY_TERMINAL"


def test_withdraw_without_confirmation_is_a_protocol_refusal(
    alice: Caller, services: Services
) -> None:
    candidate_id = capture(alice)["candidate_id"]
    cursor = high_water(services)
    args = {"candidate_id": candidate_id, "idempotency_key": _key(), "reason_ref": "reason:r"}
    with pytest.raises(ProtocolRefusal) as refused:
        alice.call(WITHDRAW, args)
    assert refused.value.code is ProtocolCode.CONTEXT_UNAVAILABLE
    assert high_water(services) == cursor


def test_confirmation_for_another_record_fails_the_gate_and_changes_nothing(alice: Caller) -> None:
    record_id = accepted_record(alice)
    other = accepted_record(alice, "Other.")
    args = {"record_id": record_id, "idempotency_key": _key(), "reason_ref": "reason:r"}
    token = alice.confirm(FORGET, args, other)
    assert code(alice.call(FORGET, args, token)) == "gate_failed"
    assert value(
        alice.call("engram_memory_get", {"record_id": record_id, "purpose_ref": alice.purpose_ref})
    )


def test_a_confirmation_is_single_use(alice: Caller) -> None:
    record_id = accepted_record(alice)
    args = {"record_id": record_id, "idempotency_key": _key(), "reason_ref": "reason:r"}
    token = alice.confirm(FORGET, args, record_id)
    value(alice.call(FORGET, args, token))
    assert code(alice.call(FORGET, args, token)) == "gate_failed"


def test_retain_without_permission_is_unauthorized(alice: Caller) -> None:
    dave = alice.as_(principal="user:dave")  # contributor: no retain permission
    args = demo_capture_arguments("Keep derivatives.", _key())
    args["payload"]["retention"] = {"derivative_rule": "retain"}
    op = operation_digest(CAPTURE, normalize(args))
    assert code(dave.call(CAPTURE, args, dave.confirm(CAPTURE, args, op))) == "UNAUTHORIZED"
    steward = {**args, "idempotency_key": _key()}
    assert value(alice.call(CAPTURE, steward))["status"] == "committed_pending"


def test_expiry_beyond_the_ceiling_is_unauthorized_and_in_the_past_invalid(alice: Caller) -> None:
    args = demo_capture_arguments("Expiring.", _key())
    args["payload"]["retention"] = {
        "derivative_rule": "make-ineligible",
        "expires_at": "2999-01-01T00:00:00.000Z",
    }
    assert code(alice.call(CAPTURE, args)) == "UNAUTHORIZED"
    args["payload"]["retention"]["expires_at"] = "2020-01-01T00:00:00.000Z"
    assert code(alice.call(CAPTURE, args)) == "INVALID_SCHEMA"


def test_reconciliation_families_need_consent(alice: Caller) -> None:
    args = demo_capture_arguments("Family.", _key())
    args["payload"]["reconciliation"] = {"family_refs": ["family:unconsented"]}
    assert code(alice.call(CAPTURE, args)) == "UNAUTHORIZED"
    args["payload"]["reconciliation"] = {"family_refs": ["family:support-case-notes"]}
    assert value(alice.call(CAPTURE, args))["status"] == "committed_pending"


def test_forgotten_content_recaptured_is_held_for_adjudication(alice: Caller) -> None:
    args = demo_capture_arguments("Forgotten fact.", _key())
    outcome = value(admit(alice, value(alice.call(CAPTURE, args))["candidate_id"]))["outcome"]
    value(forget(alice, outcome["record_id"]))
    again = value(alice.call(CAPTURE, {**args, "idempotency_key": _key()}))
    held = value(admit(alice, again["candidate_id"]))["outcome"]
    assert held["status"] == "pending_adjudication"
    assert "record_id" not in held


def test_original_capture_key_after_forget_is_a_replay(alice: Caller) -> None:
    args = demo_capture_arguments("Replayed after forget.", _key())
    first = value(alice.call(CAPTURE, args))
    record_id = value(admit(alice, first["candidate_id"]))["outcome"]["record_id"]
    value(forget(alice, record_id))
    assert value(alice.call(CAPTURE, args))["status"] == "duplicate_exact"


def test_deadline_in_the_past_is_deadline_exceeded_and_writes_nothing(
    alice: Caller, services: Services
) -> None:
    cursor = high_water(services)
    args = demo_capture_arguments("Late.", _key())
    assert code(alice.call(CAPTURE, args, deadline_ms=1)) == "DEADLINE_EXCEEDED"
    assert high_water(services) == cursor


def test_secret_shaped_text_is_refused_and_never_stored(alice: Caller, services: Services) -> None:
    cursor = high_water(services)
    args = demo_capture_arguments("creds: password=hunter2xyz", _key())
    assert code(alice.call(CAPTURE, args)) == "INVALID_SCHEMA"
    assert high_water(services) == cursor


def test_reader_does_not_see_capture_at_all(alice: Caller) -> None:
    bob = alice.as_(principal="user:bob")
    with pytest.raises(ProtocolRefusal) as refused:
        bob.call(CAPTURE, demo_capture_arguments("x", _key()))
    assert refused.value.code is ProtocolCode.UNKNOWN_TOOL


def test_host_without_memory_opt_in_exposes_nothing(alice: Caller, services: Services) -> None:
    services.settings = type(services.settings)(host_memory_enabled=False)
    assert alice.service.list_tools(alice.token()) == []
    with pytest.raises(ProtocolRefusal) as refused:
        alice.call("engram_memory_search", {"query": "x", "purpose_ref": alice.purpose_ref})
    assert refused.value.code is ProtocolCode.UNKNOWN_TOOL


def test_get_over_the_packet_budget_is_projection_oversized(alice: Caller) -> None:
    record_id = accepted_record(alice, "long " * 2000)
    args = {"record_id": record_id, "purpose_ref": alice.purpose_ref, "max_packet_bytes": 4096}
    assert code(alice.call("engram_memory_get", args)) == "PROJECTION_OVERSIZED"


def test_expired_record_is_not_disclosed_even_before_an_expire_event(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice, "Short lived.")
    args = {"record_id": record_id, "purpose_ref": alice.purpose_ref}
    assert value(alice.call("engram_memory_get", args))["record"]["record_id"] == record_id
    later_ms = 4_102_444_800_000  # 2100-01-01: past the 90-day default TTL
    services.clock_ms = lambda: later_ms
    assert code(alice.call("engram_memory_get", args, now_s=later_ms // 1000)) == "NOT_FOUND"


def test_search_pages_follow_cursors_and_reject_tampering(alice: Caller) -> None:
    for i in range(3):
        accepted_record(alice, f"Parcel refund case number {i}.")
    args: dict[str, Any] = {"query": "parcel refund", "purpose_ref": alice.purpose_ref, "limit": 1}
    ranks, cursor = [], None
    for _ in range(3):
        page = value(
            alice.call(
                "engram_memory_search", {**args, **({"page_cursor": cursor} if cursor else {})}
            )
        )
        ranks += [r["rank"] for r in page["records"]]
        cursor = page.get("next_page_cursor")
    assert ranks == [1, 2, 3]
    assert cursor is None
    first = value(alice.call("engram_memory_search", args))["next_page_cursor"]
    tampered = first[:-2] + ("A" if first[-2] != "A" else "B") + first[-1]
    assert (
        code(alice.call("engram_memory_search", {**args, "page_cursor": tampered})) == "STALE_PAGE"
    )
    other_query = {**args, "query": "refund", "page_cursor": first}
    assert code(alice.call("engram_memory_search", other_query)) == "STALE_PAGE"


def test_semantic_channel_required_is_ranking_unavailable(alice: Caller) -> None:
    args = {
        "query": "x",
        "purpose_ref": alice.purpose_ref,
        "capability_policy": {"minimum_channels": "lexical_and_semantic", "network": "forbid"},
    }
    envelope = alice.call("engram_memory_search", args)
    assert code(envelope) == "RANKING_UNAVAILABLE"
    assert envelope["error"]["retriable"] is True


def test_capture_instant_formats_as_contract_instant() -> None:
    assert format_instant(0) == "1970-01-01T00:00:00.000Z"


def _wrapped_key(services: Services, item_id: str) -> bytes:
    wrapped = services.keys.get("tenant:acme/workspace:support", item_id)
    assert wrapped is not None
    return wrapped


def _files_holding(services: Services, needle: bytes) -> list[str]:
    services.database.checkpoint()  # fold the WAL so the main file is what is scanned too
    root = services.keys.directory.parent
    return [p.name for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_forget_leaves_no_copy_of_the_wrapped_key_anywhere(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice, "Shred me.")
    wrapped = _wrapped_key(services, record_id)
    services.database.checkpoint()
    assert _files_holding(services, wrapped)  # the scan does see the key while it lives
    forgotten = value(forget(alice, record_id))
    assert forgotten["projection_invalidation"] == "complete"
    assert "coverage_receipt_digest" in forgotten
    assert _files_holding(services, wrapped) == []


def test_withdraw_destroys_the_candidate_key_and_reports_complete(
    alice: Caller, services: Services
) -> None:
    candidate_id = capture(alice, "Withdraw me.")["candidate_id"]
    wrapped = _wrapped_key(services, candidate_id)
    assert value(withdraw(alice, candidate_id))["key_destruction"] == "complete"
    assert _files_holding(services, wrapped) == []


def test_admission_destroys_the_pending_key_of_accepted_and_rejected_candidates(
    alice: Caller, services: Services
) -> None:
    accepted = capture(alice, "Accepted.")["candidate_id"]
    rejected = capture(alice, "Rejected.", evidence_ref="evidence:untrusted/x")["candidate_id"]
    keys = [_wrapped_key(services, accepted), _wrapped_key(services, rejected)]
    value(admit(alice, accepted))
    value(admit(alice, rejected))
    assert all(_files_holding(services, key) == [] for key in keys)


def test_forgotten_content_that_policy_rejects_stays_rejected(alice: Caller) -> None:
    args = demo_capture_arguments("Forgotten, then re-sent untrusted.", _key())
    outcome = value(admit(alice, value(alice.call(CAPTURE, args))["candidate_id"]))["outcome"]
    value(forget(alice, outcome["record_id"]))
    untrusted = demo_capture_arguments(
        "Forgotten, then re-sent untrusted.", _key(), evidence_ref="evidence:untrusted/y"
    )
    untrusted["payload"] = args["payload"]  # same content, other evidence
    again = value(alice.call(CAPTURE, untrusted))
    assert value(admit(alice, again["candidate_id"]))["outcome"]["status"] == "rejected"
