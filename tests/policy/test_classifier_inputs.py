"""Classifier names in decision inputs (issue 22 item 1): present only when the scope
classifies, bound by the receipt's input digest, decided by the shipped bundle in both
engines the same way, and handed to the service by discovery."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engram_memory.policy.decider import (
    ClassifierFacts,
    PolicyDecider,
    Subject,
)
from engram_memory.policy.opa_server import OpaServerEngine
from tests.policy.conftest import CANDIDATE, NOW_MS, fixed_clock, subject

ACCOUNTS = subject(workspace="accounts")
ADVISOR = replace(ACCOUNTS, principal="user:zoe", groups=("group:support-advisors",))
OFFICER = replace(ADVISOR, groups=("group:records-officers",))
# (subject, names the record matched) -> the redaction rule the shipped bundle applies.
REDACTIONS = [
    (ADVISOR, None, "account-reader-view"),
    (ADVISOR, {}, "account-reader-view"),
    (ADVISOR, {"context": ["customer"]}, "customer-record-reader-view"),
    (
        ADVISOR,
        {"primary": ["customer", "iban"], "decision": ["customer"]},
        "customer-record-reader-view",
    ),
    (ADVISOR, {"citations": ["iban"]}, "account-reader-view"),
    (OFFICER, {"primary": ["customer"]}, "records-officer-view"),
    (ACCOUNTS, {"primary": ["customer"]}, "account-manager-view"),
]
FACTS = [None, {}, {"primary": ["customer"]}, {"citations": ["iban"]}, {"primary": ["email"]}]
OUTCOMES = ["accept", "accept", "adjudication_required", "adjudication_required", "accept"]


def test_the_shipped_accounts_workspace_holds_on_the_names_and_receipts_bind_them(
    default_decider: PolicyDecider,
) -> None:
    results = [default_decider.admission(ACCOUNTS, CANDIDATE, NOW_MS, f) for f in FACTS]
    assert [r.decision for r in results] == OUTCOMES
    assert results[2].receipt.reasons == ("adjudicate_classifier:customer",)
    # Every set of facts is a different input: the receipt's input digest tells them apart.
    digests = {r.receipt.receipt.input_digest for r in results}
    assert len(digests) == len(FACTS)


@pytest.mark.opa
def test_the_real_opa_server_decides_the_same(
    default_decider: PolicyDecider, opa_default_engine: OpaServerEngine
) -> None:
    served = PolicyDecider(opa_default_engine, default_decider.expected, fixed_clock)
    for facts, outcome in zip(FACTS, OUTCOMES, strict=True):
        wasm = default_decider.admission(ACCOUNTS, CANDIDATE, NOW_MS, facts)
        rest = served.admission(ACCOUNTS, CANDIDATE, NOW_MS, facts)
        assert (wasm.decision, wasm.receipt.reasons) == (rest.decision, rest.receipt.reasons)
        assert wasm.decision == outcome


def test_discovery_hands_over_the_definitions_only_where_they_are_defined(
    default_decider: PolicyDecider,
) -> None:
    accounts = default_decider.discovery(ACCOUNTS, host_memory_enabled=True)
    assert [c["name"] for c in accounts.classifiers] == ["customer", "iban", "payment-card"]
    assert default_decider.discovery(subject(), host_memory_enabled=True).classifiers == ()


def test_retention_and_confirmation_inputs_carry_the_names_only_when_given(
    default_decider: PolicyDecider,
) -> None:
    plain = default_decider.retention(ACCOUNTS, NOW_MS, "make-ineligible", None)
    named = default_decider.retention(
        ACCOUNTS, NOW_MS, "make-ineligible", None, {"primary": ["customer"]}
    )
    assert plain.allow
    assert named.allow
    assert plain.decision.receipt.input_digest != named.decision.receipt.input_digest
    gate = default_decider.confirmation(ACCOUNTS, "engram_memory_capture", {"primary": ["iban"]})
    assert gate.required is False


def _redaction_rule(decider: PolicyDecider, who: Subject, facts: ClassifierFacts | None) -> str:
    result = decider.authz(who, "engram_memory_get", facts)
    assert result.allow
    (rule,) = [r for r in result.decision.receipt.reasons if r.startswith("redaction_rule:")]
    return rule.removeprefix("redaction_rule:")


def test_the_shipped_accounts_redaction_follows_the_names_of_the_record(
    default_decider: PolicyDecider,
) -> None:
    rules = [_redaction_rule(default_decider, who, facts) for who, facts, _ in REDACTIONS]
    assert rules == [rule for _, _, rule in REDACTIONS]
    held = default_decider.authz(ADVISOR, "engram_memory_get", {"context": ["customer"]})
    assert "/components" not in held.redaction.allowed_fields
    assert "/citations" not in held.redaction.allowed_fields
    plain = default_decider.authz(ADVISOR, "engram_memory_get", {})
    assert {"/components", "/citations"} <= set(plain.redaction.allowed_fields)
    # None and {} decide alike, but only {} says "classified, nothing matched": the
    # receipt's input digest tells them apart, and binds the names of every other case.
    digests = {
        default_decider.authz(who, "engram_memory_get", facts).decision.receipt.input_digest
        for who, facts, _ in REDACTIONS
    }
    assert len(digests) == len(REDACTIONS)


@pytest.mark.opa
def test_the_real_opa_server_redacts_the_same(
    default_decider: PolicyDecider, opa_default_engine: OpaServerEngine
) -> None:
    served = PolicyDecider(opa_default_engine, default_decider.expected, fixed_clock)
    for who, facts, rule in REDACTIONS:
        wasm = default_decider.authz(who, "engram_memory_search", facts)
        rest = served.authz(who, "engram_memory_search", facts)
        assert (wasm.allow, wasm.redaction, wasm.decision.receipt.reasons) == (
            rest.allow,
            rest.redaction,
            rest.decision.receipt.reasons,
        )
        assert _redaction_rule(served, who, facts) == rule
