"""The shipped bundle's Wasm, evaluated in-process, decides every domain as written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import BundleError, PolicyUnavailable
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR, WASM_FILE
from engram_memory.policy.decider import AdmissionCandidate, PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import BundleIdentity
from tests.policy.conftest import NOW_MS, subject

ALL_TOOLS = frozenset(
    {
        "engram_memory_search",
        "engram_memory_get",
        "engram_memory_capture",
        "engram_memory_request_admission",
        "engram_memory_withdraw",
        "engram_memory_forget",
    }
)
BOB = subject(principal="user:bob")
DAVE = subject(principal="user:dave")
DAY_MS = 86_400_000


def _candidate(**changes: object) -> AdmissionCandidate:
    fields: dict[str, object] = {
        "candidate_id": "candidate_" + "0" * 64,
        "payload_digest": "sha256:" + "a" * 64,
        "record_digest": "sha256:" + "b" * 64,
        "evidence_ref": "evidence:ticket/4711",
        "evidence_digest": "sha256:" + "c" * 64,
        "component_kinds": ("decision",),
        "citation_count": 1,
        "source_refs": ("source:case",),
        "has_attestation": False,
    }
    return AdmissionCandidate.model_validate({**fields, **changes})


def test_the_engine_reports_the_verified_bundle_revision(
    embedded_default: EmbeddedWasmEngine, default_identity: BundleIdentity
) -> None:
    assert embedded_default.identity == default_identity
    assert embedded_default.revision == default_identity.revision
    assert "opa-py-wasm/" in embedded_default.engine_version


def test_a_steward_sees_all_six_tools(default_decider: PolicyDecider) -> None:
    assert default_decider.discovery(subject(), True).visible_tools == ALL_TOOLS


def test_nothing_is_visible_when_the_host_keeps_memory_off(default_decider: PolicyDecider) -> None:
    result = default_decider.discovery(subject(), False)
    assert result.visible_tools == frozenset()
    assert result.decision.reasons == ("host_memory_disabled",)


def test_a_reader_sees_read_tools_only_for_its_purpose(default_decider: PolicyDecider) -> None:
    assert default_decider.discovery(BOB, True).visible_tools == {
        "engram_memory_search",
        "engram_memory_get",
    }
    other = subject(principal="user:bob", purpose_ref="purpose:marketing")
    assert default_decider.discovery(other, True).visible_tools == frozenset()


def test_a_closed_workspace_lists_nothing(default_decider: PolicyDecider) -> None:
    result = default_decider.discovery(subject(workspace="archive"), True)
    assert result.decision.reasons == ("workspace_memory_disabled",)


def test_tenants_are_isolated(default_decider: PolicyDecider) -> None:
    carol_in_acme = subject(principal="user:carol")
    assert default_decider.discovery(carol_in_acme, True).visible_tools == frozenset()
    alice_in_globex = subject(tenant="globex", workspace="main")
    assert not default_decider.authz(alice_in_globex, "engram_memory_get").allow
    carol = subject(tenant="globex", workspace="main", principal="user:carol")
    assert default_decider.discovery(carol, True).visible_tools == ALL_TOOLS


def test_authz_grants_a_reader_the_support_case_view(default_decider: PolicyDecider) -> None:
    result = default_decider.authz(BOB, "engram_memory_search")
    assert result.allow
    assert "/components" in result.redaction.allowed_fields
    assert not result.redaction.allow_derivation_lineage
    assert result.redaction.max_packet_bytes == 65536
    assert result.decision.reasons == ("redaction_rule:support-case-view", "tool_granted")


def test_authz_denies_a_reader_forget(default_decider: PolicyDecider) -> None:
    result = default_decider.authz(BOB, "engram_memory_forget")
    assert not result.allow
    assert result.redaction.allowed_fields == ()
    assert result.decision.reasons == ("tool_not_granted",)


def test_withdraw_always_needs_a_confirmation(default_decider: PolicyDecider) -> None:
    need = default_decider.confirmation(subject(), "engram_memory_withdraw")
    assert need.required
    assert need.ttl_seconds == 120


def test_capture_needs_a_confirmation_only_where_policy_selects_it(
    default_decider: PolicyDecider,
) -> None:
    assert not default_decider.confirmation(subject(), "engram_memory_capture").required
    assert default_decider.confirmation(DAVE, "engram_memory_capture").required


def test_the_default_ttl_sets_the_expiry(default_decider: PolicyDecider) -> None:
    result = default_decider.retention(subject(), NOW_MS, "make-ineligible", None)
    assert result.allow
    assert result.expires_at_ms == NOW_MS + 90 * DAY_MS


def test_retain_needs_permission(default_decider: PolicyDecider) -> None:
    assert default_decider.retention(subject(), NOW_MS, "retain", None).allow
    assert not default_decider.retention(BOB, NOW_MS, "retain", None).allow


def test_an_expiry_beyond_the_ceiling_is_refused(default_decider: PolicyDecider) -> None:
    late = NOW_MS + 366 * DAY_MS
    result = default_decider.retention(subject(), NOW_MS, "make-ineligible", late)
    assert not result.allow
    assert result.decision.reasons == ("expires_beyond_ceiling",)


def test_reconciliation_needs_consent_for_every_family(default_decider: PolicyDecider) -> None:
    assert default_decider.reconciliation(subject(), []).allow
    assert default_decider.reconciliation(subject(), ["family:support-case-notes"]).allow
    assert not default_decider.reconciliation(subject(), ["family:hr"]).allow


@pytest.mark.parametrize(
    ("changes", "decision"),
    [
        ({}, "accept"),
        ({"evidence_ref": "evidence:untrusted/1"}, "reject"),
        ({"component_kinds": ("context",)}, "adjudication_required"),
        ({"source_refs": ("source:external/wiki",)}, "adjudication_required"),
        ({"evidence_ref": "evidence:email/1"}, "adjudication_required"),
    ],
)
def test_admission_follows_the_workspace_policy(
    default_decider: PolicyDecider, changes: dict[str, object], decision: str
) -> None:
    result = default_decider.admission(subject(), _candidate(**changes), NOW_MS)
    assert result.decision == decision
    assert result.policy_id == "acme-support-admission"
    assert result.issued_at_ms == NOW_MS


def test_a_workspace_without_admission_policy_is_policy_unavailable(
    default_decider: PolicyDecider,
) -> None:
    with pytest.raises(PolicyUnavailable) as caught:
        default_decider.admission(subject(workspace="archive"), _candidate(), NOW_MS)
    assert caught.value.code is ErrorCode.POLICY_UNAVAILABLE


def test_an_unknown_entrypoint_is_policy_unavailable(
    embedded_default: EmbeddedWasmEngine,
) -> None:
    with pytest.raises(PolicyUnavailable):
        embedded_default.evaluate("engram/admin/decision", {})


def test_an_input_that_is_not_json_is_policy_unavailable(
    embedded_default: EmbeddedWasmEngine,
) -> None:
    with pytest.raises(PolicyUnavailable):
        embedded_default.evaluate("engram/authz/decision", {"tenant": float("nan")})


def test_a_closed_engine_is_policy_unavailable() -> None:
    engine = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR, pool_size=1)
    engine.close()
    with pytest.raises(PolicyUnavailable):
        engine.evaluate("engram/authz/decision", {})


def test_a_memory_cap_below_what_the_policy_needs_refuses_to_load() -> None:
    with pytest.raises(BundleError):
        EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR, pool_size=1, max_memory_pages=1)


def test_a_tampered_wasm_is_refused_at_load(tmp_path: Path) -> None:
    copy = tmp_path / "bundle"
    shutil.copytree(DEFAULT_BUNDLE_DIR, copy)
    (copy / WASM_FILE).write_bytes(b"\0asm not really")
    with pytest.raises(BundleError):
        EmbeddedWasmEngine(copy)


@pytest.mark.opa
@pytest.mark.parametrize(
    "policy_input",
    [{"conflict": True}, {"size": 10_000_000}, {"slow": 3000}],
    ids=["conflict", "memory-cap", "timeout"],
)
def test_a_trapping_policy_is_policy_unavailable_and_the_engine_survives(
    hostile_bundle: Path, policy_input: dict[str, object]
) -> None:
    engine = EmbeddedWasmEngine(
        hostile_bundle, pool_size=1, eval_timeout_seconds=0.05, max_memory_pages=256
    )
    try:
        with pytest.raises(PolicyUnavailable):
            engine.evaluate("engram/authz/decision", policy_input)
        assert engine.evaluate("engram/authz/decision", {"ok": True}).result == {"reasons": ["ok"]}
    finally:
        engine.close()


def test_a_remembered_answer_equals_a_fresh_evaluation_and_cannot_be_altered() -> None:
    remembering = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR)
    fresh = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR, memo_entries=0)
    policy_input = {**subject().as_input(), "tool": "engram_memory_forget"}
    try:
        first = remembering.evaluate("engram/authz/decision", policy_input)
        assert isinstance(first.result, dict)
        first.result["allow"] = "tampered"  # a caller altering what it was handed
        again = remembering.evaluate("engram/authz/decision", policy_input)
        assert again == fresh.evaluate("engram/authz/decision", policy_input)
        assert again.result is not first.result
    finally:
        remembering.close()
        fresh.close()


def test_a_closed_engine_refuses_even_a_question_it_answered_before() -> None:
    engine = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR)
    policy_input = {**subject().as_input(), "tool": "engram_memory_get"}
    engine.evaluate("engram/authz/decision", policy_input)
    engine.close()
    with pytest.raises(PolicyUnavailable):
        engine.evaluate("engram/authz/decision", policy_input)


def test_the_memo_keeps_only_its_bound_of_answers() -> None:
    engine = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR, memo_entries=2)
    try:
        for tool in sorted(ALL_TOOLS):
            engine.evaluate("engram/authz/decision", {**subject().as_input(), "tool": tool})
        assert engine.remembered_answers() == 2
    finally:
        engine.close()
