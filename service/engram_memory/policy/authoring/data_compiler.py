"""Validated policy data compiled into the bundle's data document for Rego.

The document is `{"engram": {"config": {"tenants": {...}}}}`, keyed by tenant, workspace and
principal (or group) so Rego looks the caller up by key; durations become milliseconds, consented
families a set, selectors plain lists. `docs/compliance/policy-data.md` documents the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engram_memory.contract.secrets import named_pattern
from engram_memory.policy.authoring.classifier_data import compile_classifiers
from engram_memory.policy.authoring.data import (
    Retention,
    TenantPolicy,
    Workspace,
    duration_ms,
    load_policies,
)


def _selector(principals: list[str] | None, roles: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if principals:
        out["principals"] = sorted(set(principals))
    if roles:
        out["roles"] = sorted(set(roles))
    return out


def _compile_retention(retention: Retention | None) -> dict[str, Any]:
    if retention is None:
        return {}
    out: dict[str, Any] = {}
    if retention.ceiling is not None:
        out["ceiling_ms"] = duration_ms(retention.ceiling)
    if retention.default_ttl is not None:
        out["default_ttl_ms"] = duration_ms(retention.default_ttl)
    if retention.retain is not None:
        out["retain"] = _selector(retention.retain.principals, retention.retain.roles)
    return out


def _compile_workspace(policy: TenantPolicy, ws: Workspace) -> dict[str, Any]:
    principals: dict[str, list[dict[str, Any]]] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for grant in ws.grants:
        entry: dict[str, Any] = {"roles": sorted(set(grant.roles))}
        if grant.purposes:
            entry["purposes"] = sorted(set(grant.purposes))
        if grant.group is not None:
            groups.setdefault(grant.group, []).append(entry)
        else:
            principals.setdefault(grant.grantee, []).append(entry)
    redaction = []
    for rule in ws.redaction:
        compiled: dict[str, Any] = {
            "name": rule.name,
            "allowed_fields": sorted(set(rule.allowed_fields)),
            "allow_derivation_lineage": rule.allow_derivation_lineage,
            **_selector(rule.principals, rule.roles),
        }
        if rule.purposes:
            compiled["purposes"] = sorted(set(rule.purposes))
        if rule.max_packet_bytes is not None:
            compiled["max_packet_bytes"] = rule.max_packet_bytes
        if rule.classifiers:
            compiled["classifiers"] = sorted(set(rule.classifiers))
        redaction.append(compiled)
    require: dict[str, list[dict[str, Any]]] = {}
    confirmation: dict[str, Any] = {"require": require}
    if ws.confirmation is not None:
        for req in ws.confirmation.require:
            require.setdefault(req.tool, []).append(_selector(req.principals, req.roles))
        if ws.confirmation.ttl_seconds is not None:
            confirmation["ttl_seconds"] = ws.confirmation.ttl_seconds
        if ws.confirmation.approval:
            confirmation["approval"] = [
                {
                    "name": rule.name,
                    "tools": sorted(set(rule.tools)),
                    "not_requester": rule.not_requester,
                    "groups": sorted(set(rule.groups)),
                }
                for rule in ws.confirmation.approval
            ]
    families = ws.reconciliation.consented_families if ws.reconciliation else []
    semantic_purposes = ws.semantic_search.purposes if ws.semantic_search else []
    out: dict[str, Any] = {
        "memory_enabled": ws.memory_enabled,
        "roles": {role: sorted(set(tools)) for role, tools in ws.roles.items()},
        "principals": principals,
        # Grants by group, looked up by each `group:<name>` of the caller's signed claim.
        "groups": groups,
        "redaction": redaction,
        # A workspace retention block replaces the tenant's as a whole.
        "retention": _compile_retention(ws.retention or policy.retention),
        "reconciliation": {"consented_families": dict.fromkeys(sorted(families), True)},
        "semantic_search": {"purposes": dict.fromkeys(sorted(semantic_purposes), True)},
        "confirmation": confirmation,
    }
    # Tenant and workspace shapes add up: a workspace can only refuse more.
    shapes = [*(policy.never_store.patterns if policy.never_store else [])]
    shapes += ws.never_store.patterns if ws.never_store else []
    # Each carries its name in a regex comment, so a refusal's audit can name the pattern.
    out["never_store_patterns"] = sorted(
        {named_pattern(shape.name, shape.regex) for shape in shapes}
    )
    # Content classifiers (the service runs them; Rego reads only the names that matched).
    classifiers = compile_classifiers(policy.classifiers, ws.classifiers)
    if classifiers:
        out["classifiers"] = classifiers
    out["rate_limits"] = [
        {
            "name": limit.name,
            "calls": limit.calls,
            "per_ms": duration_ms(limit.per),
            **({"tools": sorted(set(limit.tools))} if limit.tools else {}),
            **_selector(limit.principals, limit.roles),
        }
        for limit in sorted(ws.rate_limits, key=lambda limit: limit.name)
    ]
    ceiling = ws.response_ceiling_bytes or policy.response_ceiling_bytes
    if ceiling is not None:
        out["response_ceiling_bytes"] = ceiling
    if ws.admission is not None:
        out["admission"] = ws.admission.model_dump(exclude_none=True)
    if ws.maintenance is not None:
        out["maintenance"] = {
            "operators": {op: sorted(set(a)) for op, a in ws.maintenance.operators.items()}
        }
    return out


def compile_tenant(policy: TenantPolicy) -> dict[str, Any]:
    """The `data.engram.config.tenants[<tenant>]` object for one validated tenant."""
    return {
        "memory_enabled": policy.memory_enabled,
        "semantic_search": policy.semantic_search,
        "workspaces": {
            name: _compile_workspace(policy, ws) for name, ws in policy.workspaces.items()
        },
    }


def compile_policies(policies_dir: Path | str) -> dict[str, Any]:
    """Validate and compile `policies_dir` into the bundle's data document.

    Raises:
        PolicyDataError: the policy data is invalid.
    """
    tenants = load_policies(policies_dir)
    return {
        "engram": {
            "config": {"tenants": {name: compile_tenant(p) for name, p in sorted(tenants.items())}}
        }
    }
