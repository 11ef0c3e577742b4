"""A deterministic decision corpus over the rule-covering test policies (assets/policies).

Inputs are drawn from the cross products below with a fixed seed, plus malformed inputs
(missing or mistyped fields), so both engines also agree on how undefined values fail.
`REASONS` lists every rule name each domain can return; the differential test requires the
corpus to produce all of them, so it provably exercises every rule.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from engram_memory.policy.bundle import DOMAINS

SCOPES = [
    ("t1", "w"),
    ("t1", "w2"),
    ("t1", "w3"),
    ("t1", "dark"),
    ("t1", "nope"),
    ("t2", "w"),
    ("nope", "w"),
]
PRINCIPALS = ["p:all", "p:read", "p:cap", "p:multi", "p:none"]
PURPOSES = ["pur:a", "pur:b"]
TOOLS = [
    "engram_memory_search",
    "engram_memory_get",
    "engram_memory_capture",
    "engram_memory_request_admission",
    "engram_memory_withdraw",
    "engram_memory_forget",
    "engram_memory_admin",
]
CAPTURE_MS = 1_767_225_600_000
DAY_MS = 86_400_000

DISABLED = {
    "tenant_not_configured",
    "tenant_memory_disabled",
    "workspace_not_configured",
    "workspace_memory_disabled",
}
GROUP_GRANTS = {"grant:group:g-read:r_read", "grant:group:g-cap:r_cap"}
# Well-formed, unknown, and malformed `groups` values (the decider never sends the last two).
GROUPS: list[Any] = [
    ["group:g-cap"],
    ["group:g-cap", "group:g-read"],
    ["group:nope"],
    "group:g-read",
    [7],
]
REASONS: dict[str, set[str]] = {
    "discovery": DISABLED
    | GROUP_GRANTS
    | {"host_memory_disabled", "memory_enabled", "tools_granted", "no_tools_granted"},
    "authz": DISABLED
    | GROUP_GRANTS
    | {
        "tool_not_granted",
        "tool_granted",
        "redaction_rule:readers-a",
        "redaction_rule:all-principal",
        "redaction_rule:everyone-else",
        "redaction_unset",
    },
    "confirmation": {
        "always_required",
        "selected_by_policy",
        "not_selected",
        "read_only_tool",
        "default_require",
    },
    "retention": {
        "default_deny",
        "invalid_capture_instant",
        "invalid_derivative_rule",
        "retain_not_permitted",
        "invalid_expires_at",
        "expires_not_after_capture",
        "expires_beyond_ceiling",
        "make_ineligible",
        "retain_permitted",
        "expires_within_ceiling",
        "expires_without_ceiling",
        "default_ttl_applied",
        "ceiling_applied",
        "no_expiry",
    },
    "reconciliation": {
        "default_deny",
        "no_families",
        "all_families_consented",
        "family_not_consented",
    },
    "semantic": DISABLED
    | {"semantic_purpose_permitted", "purpose_not_permitted", "tenant_semantic_not_enabled"},
    "maintenance": {
        "default_deny",
        "operator_holds_read",
        "operator_holds_maintain",
        "authority_not_held",
        "operator_not_human",
    },
    "admission": {
        "no_admission_policy",
        "reject_evidence_prefix",
        "adjudicate_component_kind",
        "adjudicate_min_citations",
        "adjudicate_source_prefix",
        "accept_evidence_prefix",
        "otherwise",
        "attestation_missing",
        "adjudicate_classifier:customer",
        "adjudicate_classifier:iban",
    },
}
assert set(REASONS) == set(DOMAINS)

CANDIDATE: dict[str, Any] = {
    "candidate_id": "candidate_" + "0" * 64,
    "payload_digest": "sha256:" + "a" * 64,
    "record_digest": "sha256:" + "b" * 64,
    "evidence_ref": "ev:good/1",
    "evidence_digest": "sha256:" + "c" * 64,
    "component_kinds": ["decision"],
    "citation_count": 2,
    "source_refs": ["src:case"],
    "has_attestation": True,
    "trust_class": "asserted",
}
CANDIDATE_CHANGES: list[dict[str, Any]] = [
    {},
    {"has_attestation": False},
    {"evidence_ref": "ev:bad/1"},
    {"evidence_ref": "ev:bad/1", "component_kinds": ["context"]},
    {"evidence_ref": "ev:other/1"},
    {"component_kinds": ["context", "evidence"]},
    {"citation_count": 1},
    {"source_refs": ["src:case", "src:ext/wiki"]},
    {"citation_count": 1, "source_refs": ["src:ext/x"], "component_kinds": ["context"]},
    {"citation_count": "2"},
    {"evidence_ref": 7},
    {"evidence_ref": "ev:bad/1", "source_refs": [7]},
]


def _subject(tenant: str, workspace: str, principal: str, purpose: str) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "workspace": workspace,
        "principal": principal,
        "agent_id": "agent:corpus",
        "purpose_ref": purpose,
        "host_id": "host:corpus",
    }


def _subjects() -> list[dict[str, Any]]:
    return [
        _subject(t, w, p, u) for (t, w), p, u in itertools.product(SCOPES, PRINCIPALS, PURPOSES)
    ]


def _retention_variants() -> list[dict[str, Any]]:
    expiries: list[dict[str, Any]] = [
        {},
        {"expires_at_ms": CAPTURE_MS + DAY_MS},
        {"expires_at_ms": CAPTURE_MS + 60 * DAY_MS},
        {"expires_at_ms": CAPTURE_MS},
        {"expires_at_ms": "soon"},
    ]
    rules = ["make-ineligible", "retain", "keep"]
    variants = [
        {"capture_instant_ms": CAPTURE_MS, "retention": {"derivative_rule": r, **e}}
        for r, e in itertools.product(rules, expiries)
    ]
    variants.append({"retention": {"derivative_rule": "make-ineligible"}})
    variants.append({"capture_instant_ms": CAPTURE_MS})
    return variants


def generate_corpus(seed: int = 20260101) -> list[tuple[str, dict[str, Any]]]:
    """(domain, input) pairs; the same seed always gives the same corpus."""
    rng = random.Random(seed)
    subjects = _subjects()
    corpus: list[tuple[str, dict[str, Any]]] = []
    for subject, host in itertools.product(subjects, [True, False]):
        if rng.random() < 0.5:
            corpus.append(("discovery", {**subject, "host_memory_enabled": host}))
    corpus.append(("discovery", {}))
    for subject, tool in rng.sample(list(itertools.product(subjects, TOOLS)), 160):
        corpus.append(("authz", {**subject, "tool": tool}))
    corpus.append(("authz", _subject("t1", "w", "p:all", "pur:a")))
    for subject, tool in rng.sample(list(itertools.product(subjects, TOOLS)), 90):
        corpus.append(("confirmation", {**subject, "tool": tool}))
    corpus.append(("confirmation", _subject("t1", "w", "p:all", "pur:a")))
    retention_space = list(itertools.product(subjects, _retention_variants()))
    for subject, variant in rng.sample(retention_space, 150):
        corpus.append(("retention", {**subject, **variant}))
    families: list[Any] = [[], ["f:1"], ["f:1", "f:2"], ["f:1", "f:x"], "f:1"]
    for subject, refs in rng.sample(list(itertools.product(subjects, families)), 40):
        corpus.append(("reconciliation", {**subject, "family_refs": refs}))
    corpus.append(("reconciliation", _subject("t1", "w", "p:all", "pur:a")))
    for subject in rng.sample(subjects, 40):
        corpus.append(("semantic", subject))
    corpus.append(("semantic", {}))
    for tenant, workspace, purpose in [
        ("t1", "w", "pur:a"),
        ("t1", "w", "pur:b"),
        ("t3", "w", "pur:a"),
    ]:
        corpus.append(("semantic", _subject(tenant, workspace, "p:all", purpose)))
    for subject, changes in rng.sample(list(itertools.product(subjects, CANDIDATE_CHANGES)), 90):
        candidate = {**CANDIDATE, **changes}
        corpus.append(("admission", {**subject, "now_ms": CAPTURE_MS, "candidate": candidate}))
    corpus.append(("admission", {**_subject("t1", "w", "p:all", "pur:a"), "candidate": CANDIDATE}))
    operators: list[Any] = ["human:both", "human:reader", "human:nobody", "svc:bot", 7]
    for workspace, operator, authority in itertools.product(
        ("w", "w2", "nope"), operators, ("read", "maintain", "admin")
    ):
        maintenance = {"tenant": "t1", "workspace": workspace, "operator": operator}
        corpus.append(("maintenance", {**maintenance, "authority": authority, "operation": "x"}))
    # Content classifier names (issue 22): matched or not, one kind or several, malformed.
    classifier_facts: list[Any] = [
        {},
        {"primary": ["customer"]},
        {"citations": ["iban"], "context": ["customer", "email"]},
        {"primary": ["email"]},
        {"primary": "customer"},
        ["customer"],
    ]
    for facts, changes in itertools.product(classifier_facts, CANDIDATE_CHANGES[:3]):
        subject = _subject("t1", "wc", "p:all", "pur:a")
        candidate = {**CANDIDATE, **changes}
        corpus.append(
            (
                "admission",
                {**subject, "now_ms": CAPTURE_MS, "candidate": candidate, "classifiers": facts},
            )
        )
    corpus.append(
        ("discovery", {**_subject("t1", "wc", "p:all", "pur:a"), "host_memory_enabled": True})
    )
    # Anchors: every variant in the scopes whose data holds the rules they exercise.
    for workspace in ("w", "w2"):
        anchor = _subject("t1", workspace, "p:all", "pur:a")
        for changes in CANDIDATE_CHANGES:
            candidate = {**CANDIDATE, **changes}
            corpus.append(("admission", {**anchor, "now_ms": CAPTURE_MS, "candidate": candidate}))
    for workspace, principal in [
        ("w", "p:all"),
        ("w", "p:read"),
        ("w2", "p:read"),
        ("w3", "p:all"),
    ]:
        anchor = _subject("t1", workspace, principal, "pur:a")
        corpus.extend(("retention", {**anchor, **variant}) for variant in _retention_variants())
    # Grants by group: members with and without grants of their own, on both purposes.
    for principal, purpose, groups in itertools.product(("p:none", "p:read"), PURPOSES, GROUPS):
        member = {**_subject("t1", "w", principal, purpose), "groups": groups}
        corpus.append(("discovery", {**member, "host_memory_enabled": True}))
        corpus.extend(("authz", {**member, "tool": tool}) for tool in TOOLS)
        corpus.append(("confirmation", {**member, "tool": "engram_memory_capture"}))
        retain = {"capture_instant_ms": CAPTURE_MS, "retention": {"derivative_rule": "retain"}}
        corpus.append(("retention", {**member, **retain}))
    return corpus
