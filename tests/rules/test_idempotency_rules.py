"""Issue 3, rule 1 — idempotency (SPEC §6).

Also proven elsewhere (see tests/RULES.md): replays of admission, withdraw and forget,
DIGEST_CONFLICT for another target, and MUTATION_OUTCOME_UNKNOWN with the
drop_response_after_commit failpoint (tests/failpoints).
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.canonical import canonical_text
from engram_memory.contract.types import format_instant
from engram_memory.core.runtime import Services
from tests.harness import Caller, error_of, fresh_key, ok_value
from tests.rules.steps import (
    ADMIT,
    CAPTURE,
    DAY_MS,
    GET,
    Clock,
    ClockedCaller,
    capture_op,
    count_rows,
    get_args,
    journal_operations,
)
from tests.tools.test_tool_rules import accepted_record, forget, high_water


def _without_status(output: dict[str, Any]) -> str:
    return canonical_text({k: v for k, v in output.items() if k != "status"})


def test_idempotency_reservation_is_per_scope_principal_and_key(
    alice: Caller, services: Services
) -> None:
    key = fresh_key("shared")
    args = demo_capture_arguments("Same key, three owners.", key)
    first = ok_value(alice.call(CAPTURE, args))

    # Another principal of the same scope: its own reservation, its own candidate.
    dave = alice.as_(principal="user:dave")
    by_dave = ok_value(dave.call(CAPTURE, args, dave.confirm(CAPTURE, args, capture_op(args))))
    # The same principal name in another scope (tenant globex): again independent.
    carol = alice.as_(tenant="globex", workspace="main", principal="user:carol")
    by_carol = ok_value(carol.call(CAPTURE, args))

    assert [first["status"], by_dave["status"], by_carol["status"]] == ["committed_pending"] * 3
    assert len({first["candidate_id"], by_dave["candidate_id"], by_carol["candidate_id"]}) == 3
    # alice's key still maps to alice's first result only.
    again = ok_value(alice.call(CAPTURE, args))
    assert (again["status"], again["candidate_id"]) == ("duplicate_exact", first["candidate_id"])
    assert journal_operations(services) == ["capture", "capture"]  # acme/support: alice, dave


def test_idempotency_intent_digest_covers_the_tool(alice: Caller, services: Services) -> None:
    key = fresh_key("tool")
    captured = ok_value(alice.call(CAPTURE, demo_capture_arguments("Tool-bound key.", key)))
    cursor = high_water(services)

    reused = alice.call(ADMIT, {"candidate_id": captured["candidate_id"], "idempotency_key": key})
    assert error_of(reused) == ("DIGEST_CONFLICT", False)
    assert high_water(services) == cursor
    # Nothing was decided: the candidate is still pending and admits under a new key.
    admitted = alice.call(
        ADMIT, {"candidate_id": captured["candidate_id"], "idempotency_key": fresh_key()}
    )
    assert ok_value(admitted)["outcome"]["status"] == "accepted"


def test_idempotency_intent_digest_covers_the_canonical_arguments(alice: Caller) -> None:
    key = fresh_key("canonical")
    nfc = demo_capture_arguments("Caf\u00e9 refund approved.", key)
    first = ok_value(alice.call(CAPTURE, nfc))

    # The same arguments in another form: NFD text and another key order. The digest is
    # over the canonical (NFC, JCS) arguments, so this is the same operation: a replay.
    nfd = json.loads(json.dumps(nfc), object_pairs_hook=lambda pairs: dict(reversed(pairs)))
    text = nfd["payload"]["components"][0]["text"]
    nfd["payload"]["components"][0]["text"] = unicodedata.normalize("NFD", text)
    assert nfd != nfc
    replay = ok_value(alice.call(CAPTURE, nfd))
    assert (replay["status"], replay["candidate_id"]) == ("duplicate_exact", first["candidate_id"])

    # Any real difference in the arguments, content or not, is another operation.
    other_text = demo_capture_arguments("Cafe refund approved.", key)
    other_evidence = demo_capture_arguments(
        "Caf\u00e9 refund approved.", key, evidence_ref="evidence:ticket/T-9"
    )
    other_evidence["payload"] = nfc["payload"]
    for changed in (other_text, other_evidence):
        assert error_of(alice.call(CAPTURE, changed)) == ("DIGEST_CONFLICT", False)


def test_idempotency_replay_returns_the_first_result_byte_for_byte(
    timed_alice: ClockedCaller, clock: Clock, services: Services
) -> None:
    args = demo_capture_arguments("Replay me exactly.", fresh_key("replay"))
    first = ok_value(timed_alice.call(CAPTURE, args))
    # Time passes and the journal moves on: a recomputation would differ (cursor, receipts).
    for i in range(2):
        ok_value(timed_alice.call(CAPTURE, demo_capture_arguments(f"Later {i}.", fresh_key())))
    clock.advance(60_000)

    replay = ok_value(timed_alice.call(CAPTURE, args))
    assert replay["status"] == "duplicate_exact"
    assert _without_status(replay) == _without_status(first)
    assert journal_operations(services) == ["capture"] * 3


def test_idempotency_digest_conflict_writes_nothing(alice: Caller, services: Services) -> None:
    key = fresh_key("conflict")
    original = demo_capture_arguments("Original content.", key)
    first = ok_value(alice.call(CAPTURE, original))
    record_id = accepted_record(alice, "Kept record.")
    forget_key = fresh_key("forget")
    ok_value(forget(alice, accepted_record(alice, "Forgotten record."), forget_key))
    before = (
        high_water(services),
        count_rows(services, "candidates"),
        count_rows(services, "records"),
        count_rows(services, "idempotency"),
    )

    conflict = alice.call(CAPTURE, demo_capture_arguments("Other content.", key))
    assert error_of(conflict) == ("DIGEST_CONFLICT", False)
    assert error_of(forget(alice, record_id, forget_key)) == ("DIGEST_CONFLICT", False)

    after = (
        high_water(services),
        count_rows(services, "candidates"),
        count_rows(services, "records"),
        count_rows(services, "idempotency"),
    )
    assert after == before
    assert ok_value(alice.call(GET, get_args(alice, record_id)))  # not tombstoned
    replay = ok_value(alice.call(CAPTURE, original))
    assert (replay["status"], replay["candidate_id"]) == ("duplicate_exact", first["candidate_id"])


def test_idempotency_retry_reuses_the_retention_resolved_at_first_capture(
    timed_alice: ClockedCaller, clock: Clock
) -> None:
    captured_at = clock.now_ms
    args = demo_capture_arguments("Retention is resolved once.", fresh_key("retention"))
    first = ok_value(timed_alice.call(CAPTURE, args))  # acme: default TTL 90 days

    clock.advance(DAY_MS)  # a retry a day later would resolve another default expiry
    retry = ok_value(timed_alice.call(CAPTURE, args))
    assert retry["status"] == "duplicate_exact"
    assert retry["record_digest"] == first["record_digest"]

    admitted = timed_alice.call(
        ADMIT, {"candidate_id": first["candidate_id"], "idempotency_key": fresh_key()}
    )
    record_id = ok_value(admitted)["outcome"]["record_id"]
    record = ok_value(timed_alice.call(GET, get_args(timed_alice, record_id)))["record"]
    assert record["recorded_at"] == format_instant(captured_at)
    assert record["retention"] == {
        "derivative_rule": "make-ineligible",
        "expires_at": format_instant(captured_at + 90 * DAY_MS),
    }
    assert record["record_digest"] == first["record_digest"]
