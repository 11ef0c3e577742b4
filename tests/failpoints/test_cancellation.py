"""SPEC §1.8: cancellation applies until commit. A call cancelled by its client before its
write transaction answers CANCELLED (retriable), writes nothing but its audit entry, and
leaves its idempotency key unbound; in process, against the real store and engine."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.core.failpoints import (
    PAUSE_BEFORE_COMMIT,
    UnsafeFailpoints,
    UnsafeFailpointWarning,
)
from engram_memory.core.runtime import Services
from engram_memory.tools.dispatch import CallRequest
from tests.failpoints.test_drop_response_after_commit import (
    CAPTURE,
    FORGET,
    GET,
    _accepted_record,
    journal_events,
)
from tests.harness import Caller
from tests.harness import error_of as _error
from tests.harness import fresh_key as _key
from tests.harness import ok_value as _value

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = pytest.mark.xdist_group("timing")


class _ObservedCancellation(threading.Event):
    """A cancellation flag that also says when the paused call started waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.paused.set()
        return super().wait(timeout)


def _call(
    caller: Caller,
    tool: str,
    arguments: dict[str, Any],
    cancellation: threading.Event,
    confirmation: object = None,
) -> dict[str, Any]:
    request = CallRequest(tool, arguments, caller.token(), confirmation, cancellation)
    return caller.service.call_tool(request)


def _audit_outcomes(services: Services, tool: str) -> list[str]:
    with services.database.transaction() as tx:
        rows = tx.fetchall(
            "SELECT outcome FROM audit_entries WHERE tool = ? ORDER BY sequence", [tool]
        )
    return [str(outcome) for (outcome,) in rows]


def test_a_call_cancelled_before_it_starts_is_cancelled_and_writes_nothing(
    alice: Caller, services: Services
) -> None:
    cancelled = threading.Event()
    cancelled.set()
    arguments = demo_capture_arguments("Cancelled before it began.", _key())
    assert _error(_call(alice, CAPTURE, arguments, cancelled)) == ("CANCELLED", True)
    assert journal_events(services, "capture") == []
    assert _audit_outcomes(services, CAPTURE) == ["CANCELLED"]
    # The key was never bound: the retry is a first use, not a replay.
    assert _value(alice.call(CAPTURE, arguments))["status"] == "committed_pending"


def _paused_then_cancelled(
    services: Services, call: Any, tool: str
) -> tuple[dict[str, Any], _ObservedCancellation]:
    with pytest.warns(UnsafeFailpointWarning):
        services.settings.failpoints.arm(PAUSE_BEFORE_COMMIT, tool)
    cancellation = _ObservedCancellation()
    answers: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: answers.append(call(cancellation)))
    worker.start()
    assert cancellation.paused.wait(30), "the call never reached its last check"
    cancellation.set()
    worker.join(30)
    assert not worker.is_alive()
    return answers[0], cancellation


def test_a_capture_cancelled_at_its_last_check_before_commit_writes_nothing(
    alice: Caller, services: Services
) -> None:
    arguments = demo_capture_arguments("Cancelled at the last moment.", _key())
    answer, _ = _paused_then_cancelled(
        services, lambda c: _call(alice, CAPTURE, arguments, c), CAPTURE
    )
    assert _error(answer) == ("CANCELLED", True)
    assert journal_events(services, "capture") == []
    assert _audit_outcomes(services, CAPTURE) == ["CANCELLED"]
    assert _value(alice.call(CAPTURE, arguments))["status"] == "committed_pending"


def test_a_forget_cancelled_before_commit_keeps_the_record_and_its_retry_succeeds(
    alice: Caller, services: Services
) -> None:
    record_id = _accepted_record(alice)
    arguments = {"record_id": record_id, "idempotency_key": _key(), "reason_ref": "reason:r"}

    def forget(cancellation: threading.Event) -> dict[str, Any]:
        confirmation = alice.confirm(FORGET, arguments, record_id)
        return _call(alice, FORGET, arguments, cancellation, confirmation)

    answer, _ = _paused_then_cancelled(services, forget, FORGET)
    assert _error(answer) == ("CANCELLED", True)
    assert journal_events(services, "tombstone") == []
    assert _value(alice.call(GET, {"record_id": record_id, "purpose_ref": alice.purpose_ref}))
    # The human's confirmation was spent at the gate; the retry carries a fresh one.
    retried = _value(alice.call(FORGET, arguments, alice.confirm(FORGET, arguments, record_id)))
    assert retried["replayed"] is False
    assert _audit_outcomes(services, FORGET) == ["CANCELLED", "ok"]


def test_pause_before_commit_is_armed_only_for_mutating_tools() -> None:
    with pytest.raises(ConfigurationError):
        UnsafeFailpoints().arm(PAUSE_BEFORE_COMMIT, "engram_memory_search")
