"""SPEC §6: a mutation whose response is lost after COMMIT is MUTATION_OUTCOME_UNKNOWN, and a
retry with the same key and arguments returns the definitive committed result.

The loss is produced by the test-only `UnsafeFailpoints` (drop_response_after_commit), in
process against the real DuckDB store and the embedded OPA Wasm engine.
"""

from __future__ import annotations

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.core.failpoints import ENV_VAR, UnsafeFailpoints, UnsafeFailpointWarning
from engram_memory.core.runtime import Services, ServiceSettings
from tests.harness import Caller
from tests.harness import error_of as _error
from tests.harness import fresh_key as _key
from tests.harness import ok_value as _value

CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"
GET = "engram_memory_get"
SCOPE = "tenant:acme/workspace:support"


def journal_events(services: Services, operation: str) -> list[tuple[str, str]]:
    """(cursor, target_id) of every `operation` event of the scope, in cursor order."""
    with services.database.transaction() as tx:
        rows = tx.fetchall(
            "SELECT cursor, target_id FROM journal_events "
            "WHERE scope_ref = ? AND operation = ? ORDER BY cursor",
            [SCOPE, operation],
        )
    return [(str(cursor), str(target)) for cursor, target in rows]


def _arm(services: Services, tool: str) -> None:
    with pytest.warns(UnsafeFailpointWarning):
        services.settings.failpoints.arm_drop_response_after_commit(tool)


def _accepted_record(alice: Caller) -> str:
    captured = _value(alice.call(CAPTURE, demo_capture_arguments("Refund approved.", _key("c"))))
    admitted = _value(
        alice.call(ADMIT, {"candidate_id": captured["candidate_id"], "idempotency_key": _key("a")})
    )
    assert admitted["outcome"]["status"] == "accepted"
    record_id: str = admitted["outcome"]["record_id"]
    return record_id


def test_capture_with_dropped_response_is_unknown_and_its_retry_returns_the_commit(
    alice: Caller, services: Services
) -> None:
    _arm(services, CAPTURE)
    arguments = demo_capture_arguments("Refund approved for order 4711.", _key("capture"))

    assert _error(alice.call(CAPTURE, arguments)) == ("MUTATION_OUTCOME_UNKNOWN", True)
    committed = journal_events(services, "capture")
    assert len(committed) == 1  # the commit stands although the answer was lost

    retry = _value(alice.call(CAPTURE, arguments))
    assert retry["status"] == "duplicate_exact"
    assert (retry["cursor"], retry["candidate_id"]) == committed[0]
    assert journal_events(services, "capture") == committed
    # The failpoint was one-shot and the committed candidate is a real, pending one.
    assert not services.settings.failpoints.armed
    admitted = alice.call(
        ADMIT, {"candidate_id": retry["candidate_id"], "idempotency_key": _key("a")}
    )
    assert _value(admitted)["outcome"]["status"] == "accepted"


def test_forget_with_dropped_response_is_unknown_and_its_retry_replays_the_tombstone(
    alice: Caller, services: Services
) -> None:
    record_id = _accepted_record(alice)
    _arm(services, FORGET)
    arguments = {
        "record_id": record_id,
        "idempotency_key": _key("forget"),
        "reason_ref": "reason:r",
    }

    first = alice.call(FORGET, arguments, alice.confirm(FORGET, arguments, record_id))
    assert _error(first) == ("MUTATION_OUTCOME_UNKNOWN", True)
    tombstones = journal_events(services, "tombstone")
    assert tombstones == [(tombstones[0][0], record_id)]

    # A replay still passes the gate, so the host asks the human again (SPEC §6).
    retry = _value(alice.call(FORGET, arguments, alice.confirm(FORGET, arguments, record_id)))
    assert retry["replayed"] is True
    assert retry["receipt"]["to_state"] == "tombstoned"
    assert retry["receipt"]["cursor"] == tombstones[0][0]
    assert journal_events(services, "tombstone") == tombstones
    get = alice.call(GET, {"record_id": record_id, "purpose_ref": alice.purpose_ref})
    assert _error(get) == ("NOT_FOUND", False)


def test_withdraw_and_admission_with_dropped_responses_replay_on_retry(
    alice: Caller, services: Services
) -> None:
    _arm(services, ADMIT)
    _arm(services, WITHDRAW)
    admitted = _value(alice.call(CAPTURE, demo_capture_arguments("Admit me.", _key("c"))))
    admit_args = {"candidate_id": admitted["candidate_id"], "idempotency_key": _key("admit")}
    assert _error(alice.call(ADMIT, admit_args)) == ("MUTATION_OUTCOME_UNKNOWN", True)
    replay = _value(alice.call(ADMIT, admit_args))
    assert (replay["replayed"], replay["outcome"]["status"]) == (True, "accepted")

    pending = _value(alice.call(CAPTURE, demo_capture_arguments("Withdraw me.", _key("c"))))
    candidate_id = pending["candidate_id"]
    args = {"candidate_id": candidate_id, "idempotency_key": _key("w"), "reason_ref": "reason:r"}
    first = alice.call(WITHDRAW, args, alice.confirm(WITHDRAW, args, candidate_id))
    assert _error(first) == ("MUTATION_OUTCOME_UNKNOWN", True)
    retry = _value(alice.call(WITHDRAW, args, alice.confirm(WITHDRAW, args, candidate_id)))
    assert (retry["replayed"], retry["receipt"]["to_state"]) == (True, "withdrawn")
    assert len(journal_events(services, "withdraw")) == 1


def test_failpoint_fires_only_after_a_commit(alice: Caller, services: Services) -> None:
    _arm(services, CAPTURE)
    arguments = demo_capture_arguments("Refund approved.", _key("capture"))
    broken = {**arguments, "unexpected": True}
    # A refused call commits nothing, so the armed failpoint waits for the next commit.
    assert _error(alice.call(CAPTURE, broken)) == ("INVALID_SCHEMA", False)
    assert services.settings.failpoints.armed
    assert _error(alice.call(CAPTURE, arguments)) == ("MUTATION_OUTCOME_UNKNOWN", True)
    assert _value(alice.call(CAPTURE, arguments))["status"] == "duplicate_exact"


def test_failpoints_are_armed_from_the_environment_with_a_warning() -> None:
    value = f"drop_response_after_commit:{CAPTURE}, drop_response_after_commit:{FORGET}"
    with pytest.warns(UnsafeFailpointWarning):
        failpoints = UnsafeFailpoints.from_environment({ENV_VAR: value})
    assert failpoints.drop_response_after_commit(CAPTURE)
    assert not failpoints.drop_response_after_commit(CAPTURE)
    assert failpoints.drop_response_after_commit(FORGET)
    assert not failpoints.armed


def test_unset_environment_arms_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert not ServiceSettings().failpoints.armed
    assert not UnsafeFailpoints.from_environment({ENV_VAR: ""}).armed


@pytest.mark.parametrize(
    "value",
    [
        "drop_response_after_commit:engram_memory_search",
        "drop_response_after_commit:",
        f"drop_request:{CAPTURE}",
    ],
)
def test_unknown_failpoint_or_non_mutating_tool_is_a_configuration_error(value: str) -> None:
    with pytest.raises(ConfigurationError):
        UnsafeFailpoints.from_environment({ENV_VAR: value})
