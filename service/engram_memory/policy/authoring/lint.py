"""Warnings about valid policy data that probably does not do what its author meant.

`policy validate` reports errors (the schema in `policy/data.py`: the data cannot be used)
and then these warnings (it can, but a reader would expect otherwise), each as
`<file>:<line>: warning: <path>: <message> [<id>]`. Every id is documented in
`docs/compliance/policy-data.md` with why it matters and how to fix the YAML; there is no switch to
silence one, because each has a fix that states the intent in the data itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from engram_memory._internal.yaml_source import Path_, YamlSource, dotted, read_yaml
from engram_memory.contract.types import READ_TOOLS
from engram_memory.policy.authoring import classifier_checks, mistakes
from engram_memory.policy.authoring.data import (
    Admission,
    RedactionRule,
    TenantPolicy,
    Workspace,
    load_policies,
    policy_files,
)

# `<type>:<id>`: how hosts write principals, purposes and families (SPEC keeps them
# opaque; the type is what keeps `bob` of one system apart from `bob` of another).
_TYPED = re.compile(r"[a-z][a-z0-9_.-]*:.+")  # fullmatch only
_BOUNDARY = ("/", ":", "#", "-", "_", ".", "=", "@")


@dataclass(frozen=True, slots=True)
class LintWarning:
    """One warning: its id (documented in docs/compliance/policy-data.md), where, and why."""

    warning_id: str
    file: str
    line: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: warning: {self.path}: {self.message} [{self.warning_id}]"


class _Collector:
    def __init__(self, source: YamlSource) -> None:
        self.source = source
        self.warnings: list[LintWarning] = []

    def warn(self, warning_id: str, loc: Path_, message: str) -> None:
        line = self.source.line_of(loc)
        self.warnings.append(LintWarning(warning_id, self.source.name, line, dotted(loc), message))


def _principal_lists(ws: Workspace, base: Path_) -> Iterator[tuple[Path_, Sequence[str]]]:
    """Every list of principals in a workspace's selectors, with its location."""
    for position, rule in enumerate(ws.redaction):
        yield (*base, "redaction", position, "principals"), rule.principals or ()
    if ws.retention is not None and ws.retention.retain is not None:
        yield (*base, "retention", "retain", "principals"), ws.retention.retain.principals or ()
    if ws.confirmation is not None:
        for position, req in enumerate(ws.confirmation.require):
            yield (*base, "confirmation", "require", position, "principals"), req.principals or ()
    for position, limit in enumerate(ws.rate_limits):
        yield (*base, "rate_limits", position, "principals"), limit.principals or ()


def _check_identifiers(out: _Collector, ws: Workspace, base: Path_) -> None:
    """`missing-type-prefix`: principals, purposes and families without their `<type>:`."""
    for position, grant in enumerate(ws.grants):
        loc = (*base, "grants", position, "principal")
        # A grant may name a group instead (its `group:` form is checked by the schema).
        if grant.principal is not None and not _TYPED.fullmatch(grant.principal):
            out.warn(
                "missing-type-prefix",
                loc,
                f"principal {grant.principal!r} has no type prefix (e.g. 'user:"
                f"{grant.principal}'); the host binds typed principals, so this grant "
                "matches nobody",
            )
        for index, purpose in enumerate(grant.purposes or ()):
            _check_typed(out, (*base, "grants", position, "purposes", index), purpose, "purpose")
    for loc, principals in _principal_lists(ws, base):
        for index, principal in enumerate(principals):
            if not _TYPED.fullmatch(principal):
                out.warn("missing-type-prefix", (*loc, index), _untyped_principal(principal))
    for position, rule in enumerate(ws.redaction):
        for index, purpose in enumerate(rule.purposes or ()):
            _check_typed(out, (*base, "redaction", position, "purposes", index), purpose, "purpose")
    families = ws.reconciliation.consented_families if ws.reconciliation else []
    for index, family in enumerate(families):
        loc = (*base, "reconciliation", "consented_families", index)
        _check_typed(out, loc, family, "family")


def _untyped_principal(principal: str) -> str:
    return (
        f"principal {principal!r} has no type prefix (e.g. 'user:{principal}'); it selects nobody"
    )


def _check_typed(out: _Collector, loc: Path_, value: str, kind: str) -> None:
    if not value.startswith(f"{kind}:"):
        out.warn(
            "missing-type-prefix",
            loc,
            f"{kind} {value!r} does not start with '{kind}:'; hosts bind '{kind}:<name>', "
            "so it probably matches nothing",
        )


def _check_redaction(out: _Collector, policy: TenantPolicy, ws: Workspace, base: Path_) -> None:
    """`no-redaction-rule`: memory on, nothing but `record_id` ever disclosed."""
    if policy.memory_enabled and ws.memory_enabled and not ws.redaction:
        out.warn(
            "no-redaction-rule",
            (*base, "memory_enabled"),
            "memory is enabled but there is no redaction rule: every search and get "
            "discloses only record_id",
        )


def _applies(purposes: Sequence[str] | None, purpose: str | None) -> bool:
    """Does a purpose list (None: any purpose) cover `purpose` (None: one nobody lists)?"""
    return purposes is None or (purpose is not None and purpose in purposes)


def _selects(rule: RedactionRule, grantee: str, roles: set[str], purpose: str | None) -> bool:
    if not _applies(rule.purposes, purpose):
        return False
    if not rule.principals and not rule.roles:
        return True
    return grantee in (rule.principals or ()) or bool(roles & set(rule.roles or ()))


def _check_grant_redaction(out: _Collector, ws: Workspace, base: Path_) -> None:
    """`unredacted-grant`: a grant that lets its holder search or get, for a purpose no
    redaction rule selects them under, so those reads disclose only `record_id`."""
    if not ws.memory_enabled or not ws.redaction:
        return  # closed, or `no-redaction-rule` already says it for the whole workspace
    named = sorted({p for rule in ws.redaction for p in rule.purposes or ()})
    for position, grant in enumerate(ws.grants):
        tools = {tool for role in grant.roles for tool in ws.roles.get(role, ())}
        if not tools & READ_TOOLS:
            continue
        grantee = str(getattr(grant, "grantee", grant.principal))
        same = [g for g in ws.grants if str(getattr(g, "grantee", g.principal)) == grantee]
        purposes: list[str | None] = [*grant.purposes] if grant.purposes else [None, *named]
        unselected = []
        for purpose in purposes:
            roles = {r for g in same if _applies(g.purposes, purpose) for r in g.roles}
            if not any(_selects(rule, grantee, roles, purpose) for rule in ws.redaction):
                unselected.append(purpose)
        if grant.purposes is None and len(unselected) < len(purposes):
            continue  # some purpose discloses fields; the others may be meant
        for purpose in unselected:
            when = f"for {purpose}" if purpose is not None else "for any purpose"
            out.warn(
                "unredacted-grant",
                (*base, "grants", position),
                f"{grantee} may search or get but no redaction rule selects it {when}: "
                "those reads disclose only record_id",
            )


def _adjudication_possible(admission: Admission) -> bool:
    return admission.adjudicate is not None or admission.otherwise == "adjudication_required"


def _check_adjudication(out: _Collector, ws: Workspace, base: Path_) -> None:
    """`no-maintainer`: held candidates that no operator may ever decide."""
    admission = ws.admission
    if admission is None or not _adjudication_possible(admission):
        return
    operators = ws.maintenance.operators if ws.maintenance is not None else {}
    if any("maintain" in authorities for authorities in operators.values()):
        return
    where = "adjudicate" if admission.adjudicate is not None else "otherwise"
    loc: Path_ = (*base, "admission", where)
    if where == "otherwise" and "otherwise" not in _explicit(out.source, base):
        loc = (*base, "admission")
    out.warn(
        "no-maintainer",
        loc,
        "admission can answer adjudication_required but no maintenance operator holds "
        "'maintain': held candidates can never be decided",
    )


def _explicit(source: YamlSource, base: Path_) -> set[str]:
    """The admission keys the author wrote (not defaults)."""
    prefix = (*base, "admission")
    return {str(path[-1]) for path in source.lines if path[:-1] == prefix}


def _prefix_lists(admission: Admission) -> list[tuple[str, str, Sequence[str]]]:
    """(rule, list key, prefixes) in precedence order: reject > adjudicate > accept."""
    lists: list[tuple[str, str, Sequence[str]]] = []
    if admission.reject is not None:
        lists.append(("reject", "evidence_ref_prefixes", admission.reject.evidence_ref_prefixes))
    if admission.adjudicate is not None and admission.adjudicate.source_ref_prefixes:
        lists.append(
            ("adjudicate", "source_ref_prefixes", admission.adjudicate.source_ref_prefixes)
        )
    if admission.accept is not None:
        lists.append(("accept", "evidence_ref_prefixes", admission.accept.evidence_ref_prefixes))
    return lists


def _check_prefix_shape(out: _Collector, loc: Path_, prefix: str, kind: str) -> None:
    if ":" not in prefix:
        out.warn(
            "untyped-prefix",
            loc,
            f"prefix {prefix!r} has no type separator: it also matches '{prefix}-other:...' "
            f"refs; write '{kind}:' and the rest of the ref",
        )
    elif prefix.endswith(":") and prefix.count(":") == 1:
        out.warn(
            "whole-type-prefix",
            loc,
            f"prefix {prefix!r} matches every {prefix[:-1]} ref; name the part you mean "
            f"(e.g. '{prefix}ticket/')",
        )
    elif not prefix.endswith(_BOUNDARY):
        out.warn(
            "prefix-not-at-boundary",
            loc,
            f"prefix {prefix!r} also matches '{prefix}x...' refs; end it with a separator "
            f"(e.g. '{prefix}/')",
        )


def _check_prefixes(out: _Collector, ws: Workspace, base: Path_) -> None:
    """Prefix rules that match more than they say (see docs/compliance/policy-data.md)."""
    if ws.admission is None:
        return
    lists = _prefix_lists(ws.admission)
    for rule, key, prefixes in lists:
        kind = key.split("_", 1)[0]
        for index, prefix in enumerate(prefixes):
            loc = (*base, "admission", rule, key, index)
            _check_prefix_shape(out, loc, prefix, kind)
            for other_index, other in enumerate(prefixes):
                if (
                    other_index != index
                    and prefix.startswith(other)
                    and (prefix != other or other_index < index)
                ):
                    out.warn(
                        "redundant-prefix",
                        loc,
                        f"prefix {prefix!r} is already covered by {other!r} in the same list",
                    )
                    break
    # An accept prefix under a reject prefix can never accept: reject wins (precedence).
    rejects = [p for rule, _, ps in lists if rule == "reject" for p in ps]
    for rule, key, prefixes in lists:
        if rule != "accept":
            continue
        for index, prefix in enumerate(prefixes):
            shadow = next((r for r in rejects if prefix.startswith(r)), None)
            if shadow is not None:
                out.warn(
                    "shadowed-prefix",
                    (*base, "admission", rule, key, index),
                    f"accept prefix {prefix!r} never accepts: reject prefix {shadow!r} "
                    "matches everything it does, and reject comes first",
                )


def lint_policy(policy: TenantPolicy, source: YamlSource) -> list[LintWarning]:
    """Every warning for one validated tenant file (`source` holds its lines)."""
    out = _Collector(source)
    if policy.retention is not None and policy.retention.retain is not None:
        for index, principal in enumerate(policy.retention.retain.principals or ()):
            if not _TYPED.fullmatch(principal):
                loc: Path_ = ("retention", "retain", "principals", index)
                out.warn("missing-type-prefix", loc, _untyped_principal(principal))
    mistakes.check_groups(out.warn, policy)
    mistakes.check_patterns(out.warn, policy)
    classifier_checks.check_classifiers(out.warn, policy)
    for name, ws in policy.workspaces.items():
        base: Path_ = ("workspaces", name)
        mistakes.check_shadowing(out.warn, ws, base)
        _check_redaction(out, policy, ws, base)
        _check_grant_redaction(out, ws, base)
        _check_adjudication(out, ws, base)
        _check_prefixes(out, ws, base)
        _check_identifiers(out, ws, base)
    return sorted(out.warnings, key=lambda w: (w.line, w.warning_id))


def lint_policies(policies_dir: Path | str) -> list[LintWarning]:
    """Validate `policies_dir` (errors first), then return every warning, file by file.

    Raises:
        PolicyDataError: the data is invalid (errors, not warnings).
    """
    load_policies(policies_dir)
    return _lint_files(Path(policies_dir))


def _lint_files(policies_dir: Path) -> list[LintWarning]:
    warnings: list[LintWarning] = []
    for path in policy_files(policies_dir):
        source = YamlSource(str(path))
        policy = TenantPolicy.model_validate(read_yaml(path, source))
        warnings.extend(lint_policy(policy, source))
    return warnings


def run_validate(policies_dir: str, *, strict: bool) -> int:
    """`policy validate [--strict]`: errors exit 2 (raised), warnings exit 1 under
    `--strict`, else 0. Warnings and the summary go to stdout.

    Raises:
        PolicyDataError: the data is invalid.
    """
    tenants = load_policies(policies_dir)
    warnings = _lint_files(Path(policies_dir))
    for warning in warnings:
        print(warning)
    summary = f"{len(tenants)} tenant(s) valid: {', '.join(sorted(tenants))}"
    if warnings:
        summary += f"; {len(warnings)} warning(s)"
    print(summary)
    return 1 if strict and warnings else 0
