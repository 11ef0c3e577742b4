"""A binding and a tool call, turned into the exact policy questions the service asks.

`policy test` (YAML case tables), `policy explain` and `policy effective` all describe a call
the same way: who is bound (tenant, workspace, principal, purpose, groups, agent) and what
is called (the tool and the facts its domains need). `plan_call` turns that into the list
of (entrypoint, input) pairs the service would send, by running the service's own
`PolicyDecider` methods against an engine that only records what it is asked; so the inputs
can never drift from what a real call sends. `summarize` reduces an entrypoint's result to
the fields an author states expectations about.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from engram_memory.contract.classifiers import classifier_set_for
from engram_memory.contract.exceptions import CallError, ConfigurationError, PolicyUnavailable
from engram_memory.contract.types import READ_TOOLS, ToolName, one_of, parse_instant
from engram_memory.policy.decider import (
    ADMISSION_PATH,
    AUTHZ_PATH,
    CONFIRMATION_PATH,
    DISCOVERY_PATH,
    MAINTENANCE_PATH,
    RECONCILIATION_PATH,
    RETENTION_PATH,
    SEMANTIC_PATH,
    AdmissionCandidate,
    PolicyDecider,
    Subject,
)
from engram_memory.policy.engine import BundleIdentity, EngineAnswer

MAINTENANCE = "maintenance"
DOMAIN_OF_PATH = {
    DISCOVERY_PATH: "discovery",
    AUTHZ_PATH: "authz",
    CONFIRMATION_PATH: "confirmation",
    RETENTION_PATH: "retention",
    RECONCILIATION_PATH: "reconciliation",
    SEMANTIC_PATH: "semantic",
    ADMISSION_PATH: "admission",
    MAINTENANCE_PATH: "maintenance",
}
# What `expect` may name per domain (besides `reasons` and `exact_reasons`).
EXPECTABLE: dict[str, frozenset[str]] = {
    "discovery": frozenset({"allow"}),
    "authz": frozenset({"allow", "redaction_rule"}),
    "confirmation": frozenset({"required", "ttl_seconds", "approved", "refused_by"}),
    "retention": frozenset({"allow", "expires_at_ms"}),
    "reconciliation": frozenset({"allow"}),
    "semantic": frozenset({"allow"}),
    "admission": frozenset({"outcome"}),
    "maintenance": frozenset({"allow"}),
}
# Fixed "now" of a call that names none: 2026-01-01T00:00:00.000Z (tests stay reproducible).
DEFAULT_NOW = "2026-01-01T00:00:00.000Z"
_PLACEHOLDER_DIGEST = "sha256:" + "0" * 64
_PROBE_IDENTITY = BundleIdentity(
    revision="policy-call-probe+" + _PLACEHOLDER_DIGEST, digest=_PLACEHOLDER_DIGEST
)

Ref = Annotated[str, StringConstraints(min_length=1, max_length=512)]
# The six tools and `maintenance`, one check so a typo gets one line.
CallTool = Annotated[str, one_of(*ToolName, MAINTENANCE)]
GroupRef = Annotated[str, StringConstraints(pattern=r"^group:.+$", max_length=256)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Binding(_Strict):
    """Who is bound to the call, as the host binds it (never from tool arguments)."""

    tenant: Ref
    workspace: Ref
    principal: Ref | None = None
    purpose: Ref | None = None
    groups: list[GroupRef] = Field(default_factory=list, max_length=64)
    agent: Ref = "agent:policy-call"
    host: Ref = "host:policy-call"


ComponentKind = Literal["context", "decision", "evidence"]
ClassifierKind = Literal["primary", "context", "decision", "evidence", "citations"]
ClassifierName = Annotated[str, StringConstraints(min_length=1, max_length=128)]


def _decision_only() -> list[ComponentKind]:
    return ["decision"]


class CandidateFacts(_Strict):
    """What admission sees of a candidate; digests default to placeholders."""

    evidence_ref: Ref = "evidence:unspecified"
    component_kinds: list[ComponentKind] = Field(default_factory=_decision_only)
    citation_count: Annotated[int, Field(ge=0)] = 0
    source_refs: list[Ref] = Field(default_factory=list)
    has_attestation: bool = False
    trust_class: str = "asserted"
    record_digest: str = _PLACEHOLDER_DIGEST


class ToolCall(_Strict):
    """The call: a tool (or `maintenance`) and the facts the policy domains it touches need."""

    tool: CallTool
    host_memory_enabled: bool = True
    now: str = DEFAULT_NOW
    # capture: retention and reconciliation facts
    derivative_rule: Literal["retain", "make-ineligible"] = "make-ineligible"
    expires_at: str | None = None
    family_refs: list[Ref] = Field(default_factory=list)
    # request_admission: the candidate
    candidate: CandidateFacts = Field(default_factory=CandidateFacts)
    # maintenance: the host operator and the authority asked for
    operator: Ref | None = None
    authority: Literal["read", "maintain"] = "read"
    operation: Ref = "explain"
    # a confirmed call: the human who approves it and the groups the host asserts for them
    # (four-eyes); the confirmation question then carries these approval facts
    approver: Ref | None = None
    approver_groups: list[GroupRef] | None = Field(default=None, max_length=64)
    # capture / request_admission: sample content, the primary component's text (of the
    # candidate's first component kind); the workspace's content classifiers run on it.
    # search / get: the text of a record about to be returned; its names go to the
    # authorization decision that redacts that record
    text: str | None = None
    # search / get: the names a record's classifiers matched, per kind, given directly
    # instead of `text` (what `policy effective` asks about each classifier)
    classifiers: dict[ClassifierKind, list[ClassifierName]] | None = None


@dataclass(frozen=True, slots=True)
class PolicyQuery:
    """One question the service would ask: the domain, its entrypoint and the exact input."""

    domain: str
    path: str
    input: dict[str, Any]


def _problems(error: ValidationError, where: str) -> list[str]:
    lines = []
    for item in error.errors(include_url=False):
        loc = ".".join(str(part) for part in item["loc"]) or "<document>"
        lines.append(f"{where}{loc}: {item['msg']}")
    return lines


def parse_binding(raw: object, where: str = "binding.") -> Binding:
    """Raises: CallError: `raw` is not a binding."""
    try:
        return Binding.model_validate(raw)
    except ValidationError as exc:
        raise CallError(_problems(exc, where)) from None


def parse_call(raw: object, where: str = "call.") -> ToolCall:
    """Raises: CallError: `raw` is not a call (unknown tool or key, wrong type, bad instant)."""
    try:
        call = ToolCall.model_validate(raw)
    except ValidationError as exc:
        raise CallError(_problems(exc, where)) from None
    for name in ("now", "expires_at"):
        value = getattr(call, name)
        if value is not None:
            try:
                parse_instant(value)
            except ValueError:
                problem = f"{where}{name}: not an instant (YYYY-MM-DDTHH:MM:SS.mmmZ)"
                raise CallError([problem]) from None
    return call


def _require_for(binding: Binding, call: ToolCall) -> None:
    missing = []
    if call.tool == MAINTENANCE:
        if call.operator is None:
            missing.append("call.operator: required for a maintenance call")
    else:
        missing += [
            f"binding.{name}: required for a tool call"
            for name in ("principal", "purpose")
            if getattr(binding, name) is None
        ]
    if missing:
        raise CallError(missing)


def subject_of(binding: Binding) -> Subject:
    """The decider's `Subject` for `binding`, with its groups when it has any."""
    subject = Subject(
        tenant=binding.tenant,
        workspace=binding.workspace,
        principal=binding.principal or "",
        agent_id=binding.agent,
        purpose_ref=binding.purpose or "",
        host_id=binding.host,
    )
    if binding.groups:
        # `Subject.groups` is the signed groups claim (issue 10 item 5); a build without it
        # cannot explain a grouped binding, so it says so instead of dropping the groups.
        groups: dict[str, Any] = {"groups": tuple(sorted(set(binding.groups)))}
        try:
            subject = dataclasses.replace(subject, **groups)
        except TypeError:
            raise CallError(["binding.groups: this build has no group grants"]) from None
    return subject


class _InputRecorder:
    """A `PolicyEngine` that records each question and declines to answer it."""

    engine_id = "policy-call-recorder"
    engine_version = "1"

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        self.asked.append((path, dict(policy_input)))
        raise PolicyUnavailable("recorded, not evaluated")

    def close(self) -> None:
        return None


def _asked(recorder: _InputRecorder, ask: Callable[[], object]) -> None:
    try:
        ask()
    except PolicyUnavailable:
        return


def classifier_facts(
    call: ToolCall, definitions: Sequence[Mapping[str, Any]]
) -> dict[str, list[str]] | None:
    """What the service's classifiers would hand policy for `call.text` (None: the scope has
    no classifiers, so the service adds no `classifiers` to the input).

    Raises:
        CallError: a definition does not compile.
    """
    if not definitions:
        return None
    if call.classifiers is not None:
        return {k: sorted(set(n)) for k, n in sorted(call.classifiers.items()) if n}
    try:
        classifiers = classifier_set_for(definitions)
    except ConfigurationError:
        raise CallError(["classifiers: a definition of this workspace does not compile"]) from None
    text = call.text or ""
    kind = call.candidate.component_kinds[0] if call.candidate.component_kinds else "decision"
    return classifiers.classify({"primary": text, kind: text})


def workspace_classifiers(
    compiled: Mapping[str, Any] | None, binding: Binding
) -> list[Mapping[str, Any]]:
    """The compiled classifier definitions of the binding's workspace (none without data)."""
    tenants = (compiled or {}).get("engram", {}).get("config", {}).get("tenants", {})
    workspace = tenants.get(binding.tenant, {}).get("workspaces", {}).get(binding.workspace, {})
    return list(workspace.get("classifiers", []))


def plan_call(
    binding: Binding, call: ToolCall, classifiers: Sequence[Mapping[str, Any]] = ()
) -> list[PolicyQuery]:
    """Every policy question a call asks, in the service's order (SPEC §1.8): discovery for
    every tool; confirmation for a mutation; authorization; then the tool's own domains
    (the semantic channel for search, retention and reconciliation for capture, admission for
    request_admission). A
    `maintenance` call asks the maintenance domain only. All domains are listed even when an
    earlier one would stop the real call, so each can be explained and tested.

    `classifiers`: the workspace's content classifier definitions; the names they match in
    `call.text` go to the confirmation, retention and admission questions, and to the
    authorization of a search or get (it redacts the record), as the service sends them.

    Raises:
        CallError: the binding lacks what the call needs (principal and purpose for a
            tool, an operator for maintenance).
    """
    _require_for(binding, call)
    facts = classifier_facts(call, classifiers)
    recorder = _InputRecorder()
    now_ms = parse_instant(call.now)
    decider = PolicyDecider(recorder, _PROBE_IDENTITY, lambda: now_ms)
    if call.tool == MAINTENANCE:
        operator = call.operator or ""
        _asked(
            recorder,
            lambda: decider.maintenance(
                binding.tenant, binding.workspace, operator, call.authority, call.operation
            ),
        )
    else:
        subject, tool = subject_of(binding), call.tool
        _asked(recorder, lambda: decider.discovery(subject, call.host_memory_enabled))
        approver = call.approver
        if approver is not None:
            groups = call.approver_groups
            _asked(recorder, lambda: decider.approval(subject, tool, approver, groups))
        elif tool not in READ_TOOLS:
            gate_facts = facts if tool == ToolName.CAPTURE else None
            _asked(recorder, lambda: decider.confirmation(subject, tool, gate_facts))
        # A read's authorization redacts a record: it sees that record's names (`{}`
        # without text, as the service asks before any record is opened).
        read_facts = facts if tool in READ_TOOLS else None
        _asked(recorder, lambda: decider.authz(subject, tool, read_facts))
        if tool == ToolName.SEARCH:
            # Asked when the service has the semantic channel configured (SPEC §10.2).
            _asked(recorder, lambda: decider.semantic_channel(subject))
        elif tool == ToolName.CAPTURE:
            expires = None if call.expires_at is None else parse_instant(call.expires_at)
            rule = call.derivative_rule
            _asked(recorder, lambda: decider.retention(subject, now_ms, rule, expires, facts))
            _asked(recorder, lambda: decider.reconciliation(subject, call.family_refs))
        elif tool == ToolName.REQUEST_ADMISSION:
            candidate_facts = call.candidate
            candidate = AdmissionCandidate(
                candidate_id="candidate:policy-call",
                payload_digest=_PLACEHOLDER_DIGEST,
                record_digest=candidate_facts.record_digest,
                evidence_ref=candidate_facts.evidence_ref,
                evidence_digest=_PLACEHOLDER_DIGEST,
                component_kinds=tuple(candidate_facts.component_kinds),
                citation_count=candidate_facts.citation_count,
                source_refs=tuple(candidate_facts.source_refs),
                has_attestation=candidate_facts.has_attestation,
                trust_class=candidate_facts.trust_class,
            )
            _asked(recorder, lambda: decider.admission(subject, candidate, now_ms, facts))
    return [PolicyQuery(DOMAIN_OF_PATH[path], path, inp) for path, inp in recorder.asked]


def _reasons(result: Mapping[str, Any]) -> list[str]:
    reasons = result.get("reasons")
    return [str(r) for r in reasons] if isinstance(reasons, list) else []


def summarize(domain: str, tool: str, result: object) -> dict[str, Any]:
    """The fields of a `domain` result for a call of `tool` that an author states
    expectations about (see `EXPECTABLE`), plus `reasons`. For discovery `allow` means the
    tool is listed. A result that is not an object summarizes as `{"error": ...}` (the
    service would answer POLICY_UNAVAILABLE)."""
    if not isinstance(result, Mapping):
        return {"error": "result is not an object", "reasons": []}
    out: dict[str, Any] = {"reasons": _reasons(result)}
    if domain == "discovery":
        visible = result.get("visible_tools")
        out["allow"] = isinstance(visible, list) and tool in visible
    elif domain == "confirmation":
        out["required"] = result.get("required")
        out["ttl_seconds"] = result.get("ttl_seconds")
        if "approved" in result:
            out["approved"] = result.get("approved")
            out["refused_by"] = result.get("refused_by")
    elif domain == "admission":
        out["outcome"] = result.get("decision")
    else:
        out["allow"] = result.get("allow")
    if domain == "authz":
        named = [r.split(":", 1)[1] for r in out["reasons"] if r.startswith("redaction_rule:")]
        out["redaction_rule"] = named[0] if named else None
    if domain == "retention" and "expires_at_ms" in result:
        out["expires_at_ms"] = result["expires_at_ms"]
    return out


def known_tools() -> tuple[str, ...]:
    return (*ToolName, MAINTENANCE)
