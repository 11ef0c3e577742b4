"""Issue 3, rule 5 — retention and reconciliation by policy (SPEC §11), at exact edges.

acme/support (policies/acme.yaml): ceiling 365 d, default TTL 90 d, `retain` for stewards,
consent for family:support-case-notes. globex/main: no ceiling, no default TTL.
Also proven in tests/tools/test_tool_rules.py (see tests/RULES.md).
"""

from __future__ import annotations

from typing import Any

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.types import format_instant
from engram_memory.core.runtime import Services
from tests.harness import Caller, error_of, fresh_key, ok_value
from tests.rules.steps import CAPTURE, DAY_MS, GET, Clock, ClockedCaller, get_args
from tests.tools.test_tool_rules import admit, high_water


def _expiring(expires_at_ms: int) -> dict[str, Any]:
    args = demo_capture_arguments("Expiring.", fresh_key())
    args["payload"]["retention"] = {
        "derivative_rule": "make-ineligible",
        "expires_at": format_instant(expires_at_ms),
    }
    return args


def _admitted_record(caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    candidate_id = ok_value(caller.call(CAPTURE, args))["candidate_id"]
    record_id = ok_value(admit(caller, candidate_id))["outcome"]["record_id"]
    record: dict[str, Any] = ok_value(caller.call(GET, get_args(caller, record_id)))["record"]
    return record


def test_retention_expires_at_must_be_after_the_capture_instant(
    timed_alice: ClockedCaller, clock: Clock, services: Services
) -> None:
    for not_after in (clock.now_ms - 1, clock.now_ms):
        envelope = timed_alice.call(CAPTURE, _expiring(not_after))
        assert error_of(envelope) == ("INVALID_SCHEMA", False)
    assert high_water(services) == 0
    assert ok_value(timed_alice.call(CAPTURE, _expiring(clock.now_ms + 1)))


def test_retention_expires_at_within_the_policy_ceiling_else_unauthorized(
    timed_alice: ClockedCaller, clock: Clock, services: Services
) -> None:
    ceiling = clock.now_ms + 365 * DAY_MS
    assert error_of(timed_alice.call(CAPTURE, _expiring(ceiling + 1))) == ("UNAUTHORIZED", False)
    assert high_water(services) == 0
    record = _admitted_record(timed_alice, _expiring(ceiling))
    assert record["retention"]["expires_at"] == format_instant(ceiling)


def test_retention_family_refs_need_consent_for_every_listed_family(
    alice: Caller, services: Services
) -> None:
    args = demo_capture_arguments("Two families, one consented.", fresh_key())
    args["payload"]["reconciliation"] = {"family_refs": ["family:hr", "family:support-case-notes"]}
    assert error_of(alice.call(CAPTURE, args)) == ("UNAUTHORIZED", False)
    assert high_water(services) == 0


def test_retention_defaults_make_ineligible_default_ttl_and_no_families(
    timed_alice: ClockedCaller, clock: Clock
) -> None:
    captured_at = clock.now_ms
    record = _admitted_record(timed_alice, demo_capture_arguments("Defaults.", fresh_key()))
    assert record["retention"] == {
        "derivative_rule": "make-ineligible",
        "expires_at": format_instant(captured_at + 90 * DAY_MS),
    }
    assert record["reconciliation"] == {"family_refs": []}


def test_retention_without_ceiling_or_default_ttl_sets_no_expiry(
    timed_alice: ClockedCaller,
) -> None:
    carol = timed_alice.as_(tenant="globex", workspace="main", principal="user:carol")
    record = _admitted_record(carol, demo_capture_arguments("Kept open.", fresh_key()))
    assert record["retention"] == {"derivative_rule": "make-ineligible"}
