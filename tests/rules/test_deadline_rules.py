"""Issue 3, rule 6 — deadlines (SPEC §1.8: a deadline applies until commit).

The host's `deadline_ms` passes while the call is under way (a slow policy answer): the
call is DEADLINE_EXCEEDED (retriable) with nothing written, and the retry with the same key
and arguments then succeeds. Staleness (POLICY_STALE) is proven with a real OPA server in
tests/staleness (see tests/RULES.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.runtime import Services
from tests.harness import error_of, fresh_key, ok_value
from tests.rules.steps import (
    ADMIT,
    CAPTURE,
    FORGET,
    GET,
    SCOPE,
    Clock,
    ClockedCaller,
    count_rows,
    get_args,
    journal_operations,
)
from tests.tools.test_tool_rules import accepted_record, capture

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = pytest.mark.xdist_group("timing")

# Which policy question the deadline runs out during, per tool (the last one before commit).
SLOW_DECISION = {CAPTURE: "reconciliation", ADMIT: "admission", FORGET: "authz"}


def _slow(services: Services, clock: Clock, method: str, by_ms: int) -> None:
    """Make the decider's `method` take `by_ms` (once) on the shared clock."""
    original = getattr(services.decider, method)

    def slow(*args: Any, **kwargs: Any) -> Any:
        setattr(services.decider, method, original)
        result = original(*args, **kwargs)
        clock.advance(by_ms)
        return result

    setattr(services.decider, method, slow)


def _prepare(tool: str, caller: ClockedCaller) -> tuple[dict[str, Any], str | None]:
    """(arguments, target) for one call of `tool` on a fresh target."""
    if tool == CAPTURE:
        return demo_capture_arguments("Deadline capture.", fresh_key()), None
    if tool == ADMIT:
        candidate_id = capture(caller, "Deadline admission.")["candidate_id"]
        return {"candidate_id": candidate_id, "idempotency_key": fresh_key()}, None
    record_id = accepted_record(caller, "Deadline forget.")
    args = {"record_id": record_id, "idempotency_key": fresh_key(), "reason_ref": "reason:r"}
    return args, record_id


@pytest.mark.parametrize("tool", [CAPTURE, ADMIT, FORGET])
def test_deadline_exceeded_mid_call_writes_nothing_and_the_retry_succeeds(
    timed_alice: ClockedCaller, clock: Clock, services: Services, tool: str
) -> None:
    args, target = _prepare(tool, timed_alice)
    journal = journal_operations(services)
    rows = {t: count_rows(services, t) for t in ("candidates", "records", "idempotency")}

    def call() -> dict[str, Any]:
        confirmation = None if target is None else timed_alice.confirm(tool, args, target)
        return timed_alice.call(tool, args, confirmation, deadline_ms=clock.now_ms + 1_000)

    _slow(services, clock, SLOW_DECISION[tool], 2_000)
    assert error_of(call()) == ("DEADLINE_EXCEEDED", True)
    assert journal_operations(services) == journal
    assert {t: count_rows(services, t) for t in rows} == rows
    if target is not None:  # not tombstoned, key not destroyed
        assert ok_value(timed_alice.call(GET, get_args(timed_alice, target)))
        assert services.keys.get(SCOPE, target) is not None

    retried = ok_value(call())  # same key and arguments, within the new deadline
    assert retried.get("replayed", False) is False
    assert retried.get("status") != "duplicate_exact"
    assert len(journal_operations(services)) == len(journal) + 1
