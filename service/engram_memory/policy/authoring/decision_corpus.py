"""The calls `policy diff` asks both bundles about, generated from both data documents.

Every tenant, and within it every workspace, principal, group and purpose named in EITHER
document, plus one unlisted value of each as a control (what a stranger gets must not
change silently either), crossed into subjects; each subject asks every domain it can
touch: discovery, authz and confirmation for every tool, retention around every ceiling and
TTL named, reconciliation for every family named, admission with candidates on either side
of every prefix and citation threshold named, and maintenance for every operator and
authority. Inputs have the exact shapes `policy/decider.py` sends, so a decision that
changes here changes in service.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from engram_memory.contract.types import ToolName
from engram_memory.policy.authoring.data_diff import duration_text

UNLISTED_TENANT = "engram-diff-unlisted-tenant"
UNLISTED_WORKSPACE = "engram-diff-unlisted-workspace"
UNLISTED_PRINCIPAL = "user:engram-diff-unlisted"
UNLISTED_PURPOSE = "purpose:engram-diff-unlisted"
UNLISTED_FAMILY = "family:engram-diff-unlisted"
UNLISTED_OPERATOR = "human:engram-diff-unlisted"
UNLISTED_REF = "engram-diff-unlisted"
UNLISTED_TOOL = "engram_memory_engram_diff_unlisted"
AGENT_ID = "agent:engram-diff"
HOST_ID = "host:engram-diff"
# A fixed instant (2026-01-01T00:00:00Z) so every answer is reproducible.
NOW_MS = 1_767_225_600_000
_DIGEST = "sha256:" + "0" * 64
_DAY_MS = 86_400_000
_KINDS = ("context", "decision", "evidence")
_OPERATIONS = {"read": "history", "maintain": "adjudicate"}


@dataclass(frozen=True, slots=True)
class Call:
    """One question to the policy: the entrypoint's domain, its input, and a short
    description a reader can act on (who, where, and what was asked)."""

    domain: str
    policy_input: dict[str, Any]
    description: str

    @property
    def path(self) -> str:
        return f"engram/{self.domain}/decision"


@dataclass(frozen=True, slots=True)
class _Names:
    """Everything named in either document."""

    tenants: dict[str, set[str]]
    principals: set[str]
    groups: set[str]
    purposes: set[str]
    families: set[str]
    operators: set[str]
    evidence_prefixes: set[str]
    source_prefixes: set[str]
    citation_thresholds: set[int]
    durations_ms: set[int]
    # Content classifier names, defined or named by a rule: an admission, and the
    # authorization of a read (its redaction), are asked with each.
    classifiers: set[str] = field(default_factory=set)


def _tenants(document: Mapping[str, Any]) -> Mapping[str, Any]:
    tenants = document.get("engram", {}).get("config", {}).get("tenants", {})
    return tenants if isinstance(tenants, Mapping) else {}


def _walk(node: object, key: str, names: _Names) -> None:
    """Collect names by the compiled key they sit under, wherever they are."""
    if isinstance(node, Mapping):
        if key in {"principals", "groups"}:
            for name in node:
                (names.groups if str(name).startswith("group:") else names.principals).add(name)
        if key == "operators":
            names.operators.update(str(name) for name in node)
        if key == "consented_families":
            names.families.update(str(name) for name in node)
        if key == "purposes":  # the semantic channel's purposes, compiled as a set
            names.purposes.update(str(name) for name in node)
        for child_key, child in node.items():
            _walk(child, str(child_key), names)
    elif isinstance(node, list):
        strings = [item for item in node if isinstance(item, str)]
        if key == "classifiers":
            names.classifiers.update(strings)
            names.classifiers.update(
                str(item["name"]) for item in node if isinstance(item, Mapping) and "name" in item
            )
        target = {
            "principals": names.principals,
            "groups": names.groups,
            "purposes": names.purposes,
            "evidence_ref_prefixes": names.evidence_prefixes,
            "source_ref_prefixes": names.source_prefixes,
        }.get(key)
        if target is not None:
            for item in strings:
                (names.groups if item.startswith("group:") else target).add(item)
        for item in node:
            _walk(item, key, names)
    elif isinstance(node, int) and not isinstance(node, bool):
        if key == "min_citations":
            names.citation_thresholds.add(node)
        elif key in {"ceiling_ms", "default_ttl_ms"}:
            names.durations_ms.add(node)


def _names(tenant: str, documents: tuple[Mapping[str, Any], ...]) -> _Names:
    """What either document names in `tenant` (another tenant's names reach this one's
    lookups exactly like the unlisted controls do, so they would only repeat them)."""
    names = _Names({}, set(), set(), set(), set(), set(), set(), set(), set(), set())
    names.tenants[tenant] = set()
    for document in documents:
        body = _tenants(document).get(tenant)
        if isinstance(body, Mapping):
            workspaces = body.get("workspaces")
            names.tenants[tenant].update(workspaces if isinstance(workspaces, Mapping) else ())
            _walk(body, "", names)
    return names


def _subject(tenant: str, workspace: str, principal: str, purpose: str) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "workspace": workspace,
        "principal": principal,
        "agent_id": AGENT_ID,
        "purpose_ref": purpose,
        "host_id": HOST_ID,
    }


def _candidates(names: _Names) -> Iterator[tuple[str, dict[str, Any]]]:
    """A plain candidate, then one change at a time on either side of every rule."""
    base: dict[str, Any] = {
        "candidate_id": "candidate:engram-diff",
        "payload_digest": _DIGEST,
        "record_digest": _DIGEST,
        "evidence_ref": f"evidence:{UNLISTED_REF}",
        "evidence_digest": _DIGEST,
        "component_kinds": ["decision"],
        "citation_count": 1,
        "source_refs": [],
        "has_attestation": False,
        "trust_class": "asserted",
    }
    yield "plain candidate", base
    for prefix in sorted(names.evidence_prefixes):
        ref = prefix + UNLISTED_REF
        yield f"evidence_ref {ref}", {**base, "evidence_ref": ref}
        yield (
            f"evidence_ref {ref}, attested",
            {**base, "evidence_ref": ref, "has_attestation": True},
        )
    for kind in _KINDS:
        yield f"component kind {kind}", {**base, "component_kinds": [kind]}
    for threshold in sorted(names.citation_thresholds):
        for count in sorted({max(threshold - 1, 0), threshold}):
            yield f"{count} citations", {**base, "citation_count": count}
    for prefix in sorted(names.source_prefixes):
        ref = prefix + UNLISTED_REF
        yield f"source_ref {ref}", {**base, "source_refs": [ref]}


def _expiries(names: _Names) -> list[tuple[int | None, str]]:
    """No expiry, then on and just past every ceiling and TTL named (and 1d, 3650d)."""
    offsets: dict[int, str] = {}
    for duration in sorted({_DAY_MS, 3650 * _DAY_MS, *names.durations_ms}):
        offsets[duration] = f"expires_at capture+{duration_text(duration)}"
        if duration in names.durations_ms:
            offsets[duration + 1] = f"expires_at capture+{duration_text(duration)}+1ms"
    expiries: list[tuple[int | None, str]] = [(None, "no expires_at")]
    return expiries + [(NOW_MS + offset, shown) for offset, shown in sorted(offsets.items())]


def _subject_calls(
    subject: dict[str, Any], who: str, names: _Names, expiries: list[tuple[int | None, str]]
) -> Iterator[Call]:
    for host_enabled in (True, False):
        shown = "tools/list" if host_enabled else "tools/list, host memory off"
        yield Call("discovery", {**subject, "host_memory_enabled": host_enabled}, f"{who} {shown}")
    for tool in (*ToolName, UNLISTED_TOOL):
        yield Call("authz", {**subject, "tool": tool}, f"{who} {tool}")
        yield Call("confirmation", {**subject, "tool": tool}, f"{who} {tool}")
    for rule in ("make-ineligible", "retain"):
        for expires, shown in expiries:
            retention: dict[str, Any] = {"derivative_rule": rule}
            if expires is not None:
                retention["expires_at_ms"] = expires
            yield Call(
                "retention",
                {**subject, "capture_instant_ms": NOW_MS, "retention": retention},
                f"{who} capture {rule}, {shown}",
            )
    for family in [*sorted(names.families), UNLISTED_FAMILY]:
        yield Call("reconciliation", {**subject, "family_refs": [family]}, f"{who} {family}")
    yield Call("semantic", dict(subject), f"{who} search ranking channel")
    for shown, candidate in _candidates(names):
        yield Call(
            "admission",
            {**subject, "now_ms": NOW_MS, "candidate": candidate},
            f"{who} request_admission, {shown}",
        )
    plain = next(_candidates(names))[1]
    for name in sorted(names.classifiers):
        yield Call(
            "admission",
            {**subject, "now_ms": NOW_MS, "candidate": plain, "classifiers": {"primary": [name]}},
            f"{who} request_admission, content classifier {name} matched",
        )
        # The redaction of a record this classifier matched (search and get ask per record).
        for tool in (ToolName.SEARCH, ToolName.GET):
            yield Call(
                "authz",
                {**subject, "tool": tool, "classifiers": {"primary": [name]}},
                f"{who} {tool}, a record content classifier {name} matched",
            )


def _tenant_calls(tenant: str, names: _Names) -> Iterator[Call]:
    expiries = _expiries(names)
    callers: list[tuple[str, tuple[str, ...]]] = [
        (principal, ()) for principal in [*sorted(names.principals), UNLISTED_PRINCIPAL]
    ]
    callers += [(UNLISTED_PRINCIPAL, (group,)) for group in sorted(names.groups)]
    purposes = [*sorted(names.purposes), UNLISTED_PURPOSE]
    for workspace in [*sorted(names.tenants[tenant]), UNLISTED_WORKSPACE]:
        scope = f"{tenant}/{workspace}"
        for principal, groups in callers:
            for purpose in purposes:
                subject = _subject(tenant, workspace, principal, purpose)
                member = ""
                if groups:
                    subject["groups"] = list(groups)
                    member = f" (in {', '.join(groups)})"
                who = f"{scope} {principal}{member} {purpose}"
                yield from _subject_calls(subject, who, names, expiries)
        for operator in [*sorted(names.operators), UNLISTED_OPERATOR]:
            for authority, operation in _OPERATIONS.items():
                policy_input = {
                    "tenant": tenant,
                    "workspace": workspace,
                    "operator": operator,
                    "authority": authority,
                    "operation": operation,
                }
                yield Call("maintenance", policy_input, f"{scope} {operator} {authority}")


def generate_calls(*documents: Mapping[str, Any]) -> list[Call]:
    """Every call of the corpus for these compiled data documents (see module docstring)."""
    tenants = {name for document in documents for name in _tenants(document)}
    calls: list[Call] = []
    for tenant in [*sorted(tenants), UNLISTED_TENANT]:
        calls.extend(_tenant_calls(tenant, _names(tenant, documents)))
    return calls
