"""The decider parses strictly, binds receipts to the bundle and never fails open."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ConfigurationError, PolicyStale, PolicyUnavailable
from engram_memory.contract.receipts import receipt_digest_of
from engram_memory.policy.decider import (
    ADMISSION_PATH,
    AUTHZ_PATH,
    PolicyDecider,
    RateLimit,
)
from engram_memory.policy.engine import BundleIdentity, EngineAnswer
from tests.policy.conftest import CANDIDATE, NOW_MS, RECORD, fixed_clock, subject

DIGEST = "sha256:" + "1" * 64
EXPECTED = BundleIdentity(revision=f"test+{DIGEST}", digest=DIGEST)

REDACTION_OK: dict[str, Any] = {
    "mode": "field-allowlist",
    "allowed_fields": ["", "/components"],
    "allow_derivation_lineage": False,
    "max_packet_bytes": 65536,
}
AUTHZ_OK: dict[str, Any] = {
    "allow": True,
    "redaction": REDACTION_OK,
    "response_ceiling_bytes": 2097152,
    "reasons": ["redaction_rule:r", "tool_granted"],
}
ADMISSION_OK = {
    "decision": "accept",
    "policy_id": "p",
    "policy_version": "1",
    "record_digest": RECORD,
    "issued_at_ms": NOW_MS,
    "reasons": ["accept_evidence_prefix"],
}


@dataclass
class FakeEngine:
    """Answers whatever it is told to; records what it was asked."""

    result: object
    revision: str = EXPECTED.revision
    error: BaseException | None = None
    engine_id: str = "fake"
    engine_version: str = "0"
    asked: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        self.asked.append((path, policy_input))
        if self.error is not None:
            raise self.error
        return EngineAnswer(result=self.result, revision=self.revision)

    def close(self) -> None:
        pass


def _decider(result: object, **kwargs: Any) -> PolicyDecider:
    return PolicyDecider(FakeEngine(result, **kwargs), EXPECTED, fixed_clock)


def test_a_well_formed_authz_result_becomes_a_typed_result_with_a_receipt() -> None:
    result = _decider(AUTHZ_OK).authz(subject(), "engram_memory_get")
    assert result.allow
    assert result.redaction.allowed_fields == ("", "/components")
    receipt = result.decision.receipt
    assert receipt.policy_path == AUTHZ_PATH
    assert receipt.bundle_revision == EXPECTED.revision
    assert receipt.bundle_digest == EXPECTED.digest
    assert receipt.engine_id == "fake"
    assert receipt.reasons == ("redaction_rule:r", "tool_granted")
    assert receipt.decided_at_ms == NOW_MS
    assert receipt.receipt_digest == receipt_digest_of(receipt.body())


def test_the_engine_receives_the_subject_and_the_tool() -> None:
    engine = FakeEngine(AUTHZ_OK)
    PolicyDecider(engine, EXPECTED, fixed_clock).authz(subject(), "engram_memory_get")
    ((path, policy_input),) = engine.asked
    assert path == AUTHZ_PATH
    assert policy_input == {**subject().as_input(), "tool": "engram_memory_get"}


@pytest.mark.parametrize(
    "result",
    [
        None,
        [],
        "allow",
        {**AUTHZ_OK, "extra": 1},
        {**AUTHZ_OK, "allow": "true"},
        {**AUTHZ_OK, "allow": 1},
        {**AUTHZ_OK, "reasons": []},
        {**AUTHZ_OK, "reasons": ["tool_granted", "a"]},
        {**AUTHZ_OK, "response_ceiling_bytes": 2097152.5},
        {**AUTHZ_OK, "redaction": {**REDACTION_OK, "mode": "mask"}},
        {**AUTHZ_OK, "redaction": {**REDACTION_OK, "allowed_fields": ["b", "a"]}},
        {**AUTHZ_OK, "redaction": {**REDACTION_OK, "allowed_fields": ["nope"]}},
        {**AUTHZ_OK, "redaction": {**REDACTION_OK, "max_packet_bytes": 0}},
        {k: v for k, v in AUTHZ_OK.items() if k != "redaction"},
        # Rate limits ride on the discovery decision, never on authz.
        {**AUTHZ_OK, "rate_limits": []},
    ],
)
def test_a_malformed_result_is_policy_unavailable(result: object) -> None:
    with pytest.raises(PolicyUnavailable) as caught:
        _decider(result).authz(subject(), "engram_memory_get")
    assert caught.value.code is ErrorCode.POLICY_UNAVAILABLE


def test_another_bundle_revision_is_policy_stale() -> None:
    other = "test+sha256:" + "2" * 64
    with pytest.raises(PolicyStale) as caught:
        _decider(AUTHZ_OK, revision=other).authz(subject(), "engram_memory_get")
    assert caught.value.code is ErrorCode.POLICY_STALE


def test_an_engine_failure_is_passed_on_as_policy_unavailable() -> None:
    with pytest.raises(PolicyUnavailable):
        _decider(None, error=PolicyUnavailable("down")).authz(subject(), "x")


def test_an_unexpected_engine_exception_is_policy_unavailable() -> None:
    with pytest.raises(PolicyUnavailable):
        _decider(None, error=RuntimeError("bug")).authz(subject(), "x")


def test_any_other_engine_error_is_policy_unavailable() -> None:
    with pytest.raises(PolicyUnavailable):
        _decider(None, error=ConfigurationError("misconfigured")).authz(subject(), "x")


DISCOVERY_OK: dict[str, Any] = {
    "visible_tools": ["engram_memory_get"],
    "never_store_patterns": ["X-[0-9]{4}"],
    "rate_limits": [
        {"name": "burst", "calls": 10, "per_ms": 1000, "tools": []},
        {"name": "gets", "calls": 3, "per_ms": 1000, "tools": ["engram_memory_get"]},
    ],
    "reasons": ["memory_enabled", "tools_granted"],
}


def test_discovery_returns_the_visible_tools_and_the_rate_limits_per_tool() -> None:
    result = _decider(DISCOVERY_OK).discovery(subject(), host_memory_enabled=True)
    assert result.visible_tools == frozenset({"engram_memory_get"})
    assert result.never_store_patterns == ("X-[0-9]{4}",)
    burst = RateLimit("burst", calls=10, per_ms=1000)
    gets = RateLimit("gets", calls=3, per_ms=1000, tools=frozenset({"engram_memory_get"}))
    assert result.limits_for("engram_memory_get") == (burst, gets)
    assert result.limits_for("engram_memory_search") == (burst,)


_LIMIT = DISCOVERY_OK["rate_limits"][0]


@pytest.mark.parametrize(
    "result",
    [
        {**DISCOVERY_OK, "visible_tools": ["engram_memory_admin"]},
        {k: v for k, v in DISCOVERY_OK.items() if k != "never_store_patterns"},
        {**DISCOVERY_OK, "never_store_patterns": ["b", "a"]},
        {k: v for k, v in DISCOVERY_OK.items() if k != "rate_limits"},
        {**DISCOVERY_OK, "rate_limits": [{**_LIMIT, "calls": 0}]},
        {**DISCOVERY_OK, "rate_limits": [{**_LIMIT, "per_ms": 0}]},
        {**DISCOVERY_OK, "rate_limits": [{**_LIMIT, "tools": ["engram_memory_admin"]}]},
        {**DISCOVERY_OK, "rate_limits": [{k: v for k, v in _LIMIT.items() if k != "tools"}]},
    ],
    ids=[
        "unknown-tool",
        "no-never-store-patterns",
        "unsorted-patterns",
        "no-rate-limits",
        "zero-calls",
        "zero-period",
        "limit-names-unknown-tool",
        "limit-without-tools",
    ],
)
def test_a_malformed_discovery_result_is_policy_unavailable(result: object) -> None:
    with pytest.raises(PolicyUnavailable):
        _decider(result).discovery(subject(), host_memory_enabled=True)


def test_a_confirmation_ttl_above_300_seconds_is_policy_unavailable() -> None:
    with pytest.raises(PolicyUnavailable):
        _decider({"required": True, "ttl_seconds": 301, "reasons": ["x"]}).confirmation(
            subject(), "engram_memory_forget"
        )


def test_retention_must_echo_a_given_expiry() -> None:
    decider = _decider({"allow": True, "expires_at_ms": 5, "reasons": ["x"]})
    with pytest.raises(PolicyUnavailable):
        decider.retention(subject(), 1, "make-ineligible", 6)
    assert decider.retention(subject(), 1, "make-ineligible", 5).expires_at_ms == 5


def test_a_denied_retention_carries_no_expiry() -> None:
    result = _decider({"allow": False, "reasons": ["retain_not_permitted"]}).retention(
        subject(), 1, "retain", None
    )
    assert not result.allow
    assert result.expires_at_ms is None


def test_reconciliation_sends_the_family_list() -> None:
    engine = FakeEngine({"allow": False, "reasons": ["family_not_consented"]})
    result = PolicyDecider(engine, EXPECTED, fixed_clock).reconciliation(subject(), ["f:1"])
    assert not result.allow
    assert engine.asked[0][1]["family_refs"] == ["f:1"]


def test_an_admission_decision_is_bound_to_the_candidate() -> None:
    engine = FakeEngine(ADMISSION_OK)
    result = PolicyDecider(engine, EXPECTED, fixed_clock).admission(subject(), CANDIDATE, NOW_MS)
    assert result.decision == "accept"
    assert result.record_digest == RECORD
    assert result.receipt.path == ADMISSION_PATH
    sent = engine.asked[0][1]
    assert sent["now_ms"] == NOW_MS
    assert sent["candidate"]["record_digest"] == RECORD


def test_an_unconfigured_admission_policy_is_policy_unavailable() -> None:
    with pytest.raises(PolicyUnavailable):
        _decider({"decision": "unconfigured", "reasons": ["no_admission_policy"]}).admission(
            subject(), CANDIDATE, NOW_MS
        )


def test_a_malformed_unconfigured_answer_is_policy_unavailable() -> None:
    with pytest.raises(PolicyUnavailable):
        _decider({"decision": "unconfigured"}).admission(subject(), CANDIDATE, NOW_MS)


@pytest.mark.parametrize(
    "changes",
    [{"issued_at_ms": NOW_MS + 1}, {"issued_at_ms": NOW_MS - 300_001}],
)
def test_an_untimely_admission_decision_is_policy_stale(changes: dict[str, object]) -> None:
    with pytest.raises(PolicyStale) as caught:
        _decider({**ADMISSION_OK, **changes}).admission(subject(), CANDIDATE, NOW_MS)
    assert caught.value.code is ErrorCode.POLICY_STALE


def test_an_admission_decision_of_another_policy_revision_is_policy_stale() -> None:
    other = "test+sha256:" + "2" * 64
    with pytest.raises(PolicyStale) as caught:
        _decider(ADMISSION_OK, revision=other).admission(subject(), CANDIDATE, NOW_MS)
    assert caught.value.code is ErrorCode.POLICY_STALE


def test_an_admission_decision_bound_to_another_record_is_policy_unavailable() -> None:
    # SPEC §4.4 step 3: an unbound decision is POLICY_UNAVAILABLE, even when it is fresh.
    unbound = {**ADMISSION_OK, "record_digest": "sha256:" + "d" * 64}
    with pytest.raises(PolicyUnavailable) as caught:
        _decider(unbound).admission(subject(), CANDIDATE, NOW_MS)
    assert caught.value.code is ErrorCode.POLICY_UNAVAILABLE


def test_an_unbound_and_untimely_admission_decision_is_policy_unavailable() -> None:
    unbound = {**ADMISSION_OK, "record_digest": "sha256:" + "d" * 64, "issued_at_ms": 0}
    with pytest.raises(PolicyUnavailable):
        _decider(unbound).admission(subject(), CANDIDATE, NOW_MS)


def test_an_admission_decision_exactly_300_seconds_old_is_still_fresh() -> None:
    decider = _decider({**ADMISSION_OK, "issued_at_ms": NOW_MS - 300_000})
    assert decider.admission(subject(), CANDIDATE, NOW_MS).decision == "accept"


@pytest.mark.parametrize(
    "changes", [{"decision": "maybe"}, {"policy_id": ""}, {"issued_at_ms": -1}]
)
def test_a_malformed_admission_decision_is_policy_unavailable(changes: dict[str, object]) -> None:
    with pytest.raises(PolicyUnavailable) as caught:
        _decider({**ADMISSION_OK, **changes}).admission(subject(), CANDIDATE, NOW_MS)
    assert caught.value.code is ErrorCode.POLICY_UNAVAILABLE
