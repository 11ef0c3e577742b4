"""Compliance-authored policy data: YAML under `policies/`, validated, compiled for Rego.

One file per tenant (schema in `docs/compliance/policy-data.md`). Validation is strict
(unknown keys, wrong types, dangling role names, ceilings below default TTLs are all errors)
and every problem is reported as `<file>:<line>: <path>: <message>`, one line each, so an author can
fix them all in one pass. `policy/data_compiler.py` turns the result into the document Rego
reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from engram_memory._internal.yaml_source import Path_, YamlSource, read_yaml
from engram_memory.contract.exceptions import PolicyDataError
from engram_memory.contract.groups import GROUP_PREFIX, is_group_ref
from engram_memory.contract.policy_regex import checked_regex
from engram_memory.contract.types import SELECTABLE_CONFIRMED_TOOLS, ToolNameText, one_of
from engram_memory.policy.authoring.classifier_data import (
    ClassifierDefinition,
)

# The tools whose confirmation a workspace may select (withdraw and forget always need one).
SelectableTool = Annotated[str, one_of(*SELECTABLE_CONFIRMED_TOOLS)]
ComponentKind = Literal["context", "decision", "evidence"]

# Opaque host references (tenant, workspace, principal, purpose, family): 1..512 chars,
# no `*` (SPEC §0: wildcard scopes are refused).
Ref = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^[^*]+$")]
Name = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_.-]{0,62}$")]
Prefix = Annotated[str, StringConstraints(min_length=1, max_length=512)]
JsonPointer = Annotated[str, StringConstraints(max_length=512, pattern=r"^(|/([^~]|~[01])*)$")]
Duration = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,12}(ms|s|m|h|d)$")]
PacketBytes = Annotated[int, Field(ge=4096, le=1_048_576)]

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> int:
    """`90d` -> 7776000000. The pattern of `Duration` has been checked already."""
    match = re.fullmatch(r"(\d+)(ms|s|m|h|d)", text)
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _not_a_group(principal: str) -> str:
    if principal.startswith(GROUP_PREFIX):
        raise ValueError("a group is granted with `group:`, not `principal:`")
    return principal


def _group_ref(group: str) -> str:
    if not is_group_ref(group):
        raise ValueError(
            "must be `group:<name>` (at most 256 UTF-8 bytes, NFC, no `*`, no control or"
            " format characters), as the host's `groups` claim carries it"
        )
    return group


def _selects_no_group(principal: str) -> str:
    if principal.startswith(GROUP_PREFIX):
        raise ValueError("selectors name principals and roles: grant the group a role instead")
    return principal


GroupRef = Annotated[str, AfterValidator(_group_ref)]
# A principal a selector names; a group here would never match anybody.
SelectedPrincipal = Annotated[Ref, AfterValidator(_selects_no_group)]


class Grant(_Model):
    """Roles for one principal, or for every caller whose signed `groups` claim names the
    group; exactly one of the two."""

    principal: Annotated[Ref, AfterValidator(_not_a_group)] | None = None
    group: GroupRef | None = None
    roles: list[Name] = Field(min_length=1)
    purposes: list[Ref] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_grantee(self) -> Grant:
        if (self.principal is None) == (self.group is None):
            raise ValueError("name exactly one of `principal` or `group`")
        return self

    @property
    def grantee(self) -> str:
        """The principal or group this grant is for."""
        return self.principal if self.principal is not None else str(self.group)


class RedactionRule(_Model):
    name: Name
    purposes: list[Ref] | None = Field(default=None, min_length=1)
    principals: list[SelectedPrincipal] | None = Field(default=None, min_length=1)
    roles: list[Name] | None = Field(default=None, min_length=1)
    allowed_fields: list[JsonPointer]
    allow_derivation_lineage: bool = False
    max_packet_bytes: PacketBytes | None = None
    # Applies only to a record one of these classifiers matched, in any component kind
    # (search and get classify each record they return: docs/compliance/classifiers.md).
    classifiers: list[Name] | None = Field(default=None, min_length=1)


class Selector(_Model):
    principals: list[SelectedPrincipal] | None = Field(default=None, min_length=1)
    roles: list[Name] | None = Field(default=None, min_length=1)


class Retention(_Model):
    ceiling: Duration | None = None
    default_ttl: Duration | None = None
    retain: Selector | None = None


class Reconciliation(_Model):
    consented_families: list[Ref] = Field(default_factory=list)


class SemanticSearch(_Model):
    """The purposes whose searches may use the semantic channel (SPEC §10.2); none listed
    permits none. The tenant must opt in too (`TenantPolicy.semantic_search`)."""

    purposes: list[Ref] = Field(default_factory=list)


class ConfirmationSelector(_Model):
    tool: SelectableTool
    principals: list[SelectedPrincipal] | None = Field(default=None, min_length=1)
    roles: list[Name] | None = Field(default=None, min_length=1)


class ApprovalRule(_Model):
    """Four-eyes: who may approve a confirmed call (checked once the host's confirmation
    verifies). A rule refuses the approver when any condition it names fails; the audit
    names the rule."""

    name: Name
    tools: list[ToolNameText] = Field(min_length=1)
    not_requester: bool = False
    groups: list[GroupRef] = Field(default_factory=list)

    @model_validator(mode="after")
    def _some_condition(self) -> ApprovalRule:
        if not self.not_requester and not self.groups:
            raise ValueError("name at least one condition: `not_requester: true` or `groups`")
        return self


class Confirmation(_Model):
    ttl_seconds: Annotated[int, Field(ge=1, le=300)] | None = None
    require: list[ConfirmationSelector] = Field(default_factory=list)
    approval: list[ApprovalRule] = Field(default_factory=list)


class PrefixRule(_Model):
    evidence_ref_prefixes: list[Prefix] = Field(min_length=1)


class AcceptRule(_Model):
    evidence_ref_prefixes: list[Prefix] = Field(min_length=1)
    require_attestation: bool = False


class AdjudicateRule(_Model):
    component_kinds: list[ComponentKind] | None = Field(default=None, min_length=1)
    min_citations: Annotated[int, Field(ge=1, le=256)] | None = None
    source_ref_prefixes: list[Prefix] | None = Field(default=None, min_length=1)
    classifiers: list[Name] | None = Field(default=None, min_length=1)  # any matched, any kind


class Admission(_Model):
    policy_id: Name
    policy_version: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    reject: PrefixRule | None = None
    adjudicate: AdjudicateRule | None = None
    accept: AcceptRule | None = None
    otherwise: Literal["reject", "adjudication_required"] = "adjudication_required"


Authority = Literal["read", "maintain"]
Operator = Annotated[str, StringConstraints(max_length=512, pattern=r"^human:[^*]+$")]


class Maintenance(_Model):
    """Host operators (humans) and the maintenance authority each holds here (SPEC §1.6)."""

    operators: dict[Operator, list[Authority]] = Field(min_length=1)


class NeverStorePattern(_Model):
    """A secret shape of this tenant or workspace (SPEC §11: policy data may add shapes)."""

    name: Name
    # Compiles, at most 512 characters, no catastrophic backtracking (like classifiers').
    regex: Annotated[
        str, StringConstraints(min_length=1, max_length=512), AfterValidator(checked_regex)
    ]


class NeverStore(_Model):
    patterns: list[NeverStorePattern] = Field(min_length=1)


class RateLimit(_Model):
    """At most `calls` calls per `per` for each principal the rule selects (SPEC §12)."""

    name: Name
    calls: Annotated[int, Field(ge=1, le=1_000_000)]
    per: Duration
    tools: list[ToolNameText] | None = Field(default=None, min_length=1)
    principals: list[SelectedPrincipal] | None = Field(default=None, min_length=1)
    roles: list[Name] | None = Field(default=None, min_length=1)


class Workspace(_Model):
    memory_enabled: bool = False
    roles: dict[Name, list[ToolNameText]] = Field(default_factory=dict)
    grants: list[Grant] = Field(default_factory=list)
    redaction: list[RedactionRule] = Field(default_factory=list)
    response_ceiling_bytes: Annotated[int, Field(ge=4096, le=67_108_864)] | None = None
    retention: Retention | None = None
    reconciliation: Reconciliation | None = None
    semantic_search: SemanticSearch | None = None
    confirmation: Confirmation | None = None
    admission: Admission | None = None
    maintenance: Maintenance | None = None
    never_store: NeverStore | None = None
    rate_limits: list[RateLimit] = Field(default_factory=list)
    classifiers: list[ClassifierDefinition] = Field(default_factory=list)


class TenantPolicy(_Model):
    schema_version: Literal[1]
    tenant: Ref
    memory_enabled: bool = False
    # The tenant's opt-in to the semantic channel; each workspace then names its purposes.
    semantic_search: bool = False
    response_ceiling_bytes: Annotated[int, Field(ge=4096, le=67_108_864)] | None = None
    retention: Retention | None = None
    never_store: NeverStore | None = None
    # The groups the host's identity provider asserts that this tenant's rules name: a
    # declaration `policy validate` checks every grant and approval rule against.
    groups: list[GroupRef] | None = None
    # Content classifiers every workspace runs (with its own): classifier_data.py.
    classifiers: list[ClassifierDefinition] = Field(default_factory=list)
    workspaces: dict[Ref, Workspace] = Field(default_factory=dict)


def _check_roles(
    source: YamlSource, loc: Path_, roles: Sequence[str] | None, defined: Mapping[str, Any]
) -> None:
    for position, role in enumerate(roles or ()):
        if role not in defined:
            source.report((*loc, position), f"unknown role {role!r} (define it under roles)")


def _check_retention(
    source: YamlSource, loc: Path_, retention: Retention, roles: Mapping[str, Any] | None
) -> None:
    if retention.retain is not None:
        if not retention.retain.principals and not retention.retain.roles:
            source.report((*loc, "retain"), "name at least one principal or role")
        if roles is not None:
            _check_roles(source, (*loc, "retain", "roles"), retention.retain.roles, roles)
    ceiling, default_ttl = retention.ceiling, retention.default_ttl
    if (
        ceiling is not None
        and default_ttl is not None
        and (duration_ms(default_ttl) > duration_ms(ceiling))
    ):
        source.report((*loc, "default_ttl"), "default_ttl exceeds ceiling")


def _check_unique_names(
    source: YamlSource, loc: Path_, rules: Sequence[ApprovalRule | RateLimit], kind: str
) -> None:
    names: dict[str, int] = {}
    for position, rule in enumerate(rules):
        if rule.name in names:
            source.report(
                (*loc, position, "name"),
                f"duplicate {kind} rule name (also rule {names[rule.name]})",
            )
        names.setdefault(rule.name, position)


def _check_rate_limits(
    source: YamlSource, loc: Path_, limits: Sequence[RateLimit], roles: Mapping[str, Any]
) -> None:
    _check_unique_names(source, loc, limits, "rate limit")
    for position, limit in enumerate(limits):
        _check_roles(source, (*loc, position, "roles"), limit.roles, roles)


def _cross_check(policy: TenantPolicy, source: YamlSource) -> None:
    """What pydantic cannot see: names that must resolve, and values that must agree."""
    if policy.retention is not None:
        _check_retention(source, ("retention",), policy.retention, None)
    check_classifiers(source, policy)
    for ws_name, ws in policy.workspaces.items():
        base: Path_ = ("workspaces", ws_name)
        for position, grant in enumerate(ws.grants):
            _check_roles(source, (*base, "grants", position, "roles"), grant.roles, ws.roles)
        names: dict[str, int] = {}
        for position, rule in enumerate(ws.redaction):
            if rule.name in names:
                source.report(
                    (*base, "redaction", position, "name"),
                    f"duplicate redaction rule name (also rule {names[rule.name]})",
                )
            names.setdefault(rule.name, position)
            _check_roles(source, (*base, "redaction", position, "roles"), rule.roles, ws.roles)
        if ws.retention is not None:
            _check_retention(source, (*base, "retention"), ws.retention, ws.roles)
        elif policy.retention is not None and policy.retention.retain is not None:
            for role in policy.retention.retain.roles or ():
                if role not in ws.roles:
                    source.report(
                        ("retention", "retain", "roles"),
                        f"role {role!r} is not defined in inheriting workspace {ws_name!r}",
                    )
        if ws.confirmation is not None:
            for position, req in enumerate(ws.confirmation.require):
                _check_roles(
                    source,
                    (*base, "confirmation", "require", position, "roles"),
                    req.roles,
                    ws.roles,
                )
            _check_unique_names(
                source, (*base, "confirmation", "approval"), ws.confirmation.approval, "approval"
            )
        _check_rate_limits(source, (*base, "rate_limits"), ws.rate_limits, ws.roles)
        adjudicate = ws.admission.adjudicate if ws.admission is not None else None
        if adjudicate is not None and not (
            adjudicate.component_kinds
            or adjudicate.min_citations
            or adjudicate.source_ref_prefixes
            or adjudicate.classifiers
        ):
            source.report((*base, "admission", "adjudicate"), "name at least one condition")


def policy_files(policies_dir: Path) -> list[Path]:
    """The tenant files of `policies_dir` (`*.yaml`, `*.yml`), in a stable order."""
    return sorted(
        (p for p in policies_dir.iterdir() if p.is_file() and p.suffix in {".yaml", ".yml"}),
        key=lambda p: p.name,
    )


def load_policies(policies_dir: Path | str) -> dict[str, TenantPolicy]:
    """Validate every tenant file of `policies_dir`; return the policies by tenant.

    Raises:
        PolicyDataError: any problem in any file (all of them are reported).
    """
    directory = Path(policies_dir)
    if not directory.is_dir():
        raise PolicyDataError([f"{directory}:1: <document>: not a directory"])
    problems: list[str] = []
    tenants: dict[str, TenantPolicy] = {}
    first_seen: dict[str, str] = {}
    for path in policy_files(directory):
        source = YamlSource(str(path))
        raw = read_yaml(path, source)
        if raw is not None:
            try:
                policy = TenantPolicy.model_validate(raw)
            except ValidationError as exc:
                for error in exc.errors(include_url=False):
                    if source.key_problems and "[key]" in error["loc"]:
                        continue  # already reported, with the right line, by _index
                    source.report(tuple(error["loc"]), error["msg"])
            else:
                _cross_check(policy, source)
                if policy.tenant in first_seen:
                    source.report(
                        ("tenant",), f"tenant already defined in {first_seen[policy.tenant]}"
                    )
                elif not source.problems:
                    first_seen[policy.tenant] = f"{source.name}:{source.line_of(('tenant',))}"
                    tenants[policy.tenant] = policy
        problems.extend(source.problems)
    if problems:
        raise PolicyDataError(problems)
    return tenants


def check_classifiers(source: YamlSource, policy: TenantPolicy) -> None:
    """A name means one classifier in a workspace (the tenant's and its own together), and
    an admission rule names only classifiers the workspace runs."""
    tenant_names: dict[str, int] = {}
    for position, definition in enumerate(policy.classifiers):
        if definition.name in tenant_names:
            source.report(
                ("classifiers", position, "name"),
                f"duplicate classifier name (also classifier {tenant_names[definition.name]})",
            )
        tenant_names.setdefault(definition.name, position)
    for ws_name, ws in policy.workspaces.items():
        names: dict[str, int] = {}
        for position, definition in enumerate(ws.classifiers):
            loc = ("workspaces", ws_name, "classifiers", position, "name")
            if definition.name in tenant_names:
                source.report(loc, "the tenant already defines a classifier of this name")
            elif definition.name in names:
                source.report(
                    loc, f"duplicate classifier name (also classifier {names[definition.name]})"
                )
            names.setdefault(definition.name, position)
        adjudicate = ws.admission.adjudicate if ws.admission is not None else None
        named: list[tuple[Path_, str]] = [
            (("workspaces", ws_name, "admission", "adjudicate", "classifiers", position), name)
            for position, name in enumerate(adjudicate.classifiers or () if adjudicate else ())
        ]
        named += [
            (("workspaces", ws_name, "redaction", index, "classifiers", position), name)
            for index, rule in enumerate(ws.redaction)
            for position, name in enumerate(rule.classifiers or ())
        ]
        for where, name in named:
            if name not in tenant_names and name not in names:
                source.report(where, f"unknown classifier {name!r} (define it under classifiers)")
