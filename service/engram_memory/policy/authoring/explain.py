"""`policy explain` and `policy effective`: what a bundle decides for a binding, and why.

Every decision shown is evaluated by a real engine over a built bundle (the embedded Wasm
engine by default, or an OPA server), with the inputs `calls.plan_call` builds the way the
service does; nothing here re-implements a rule. The YAML entries behind a decision are
named by looking the caller's scope up in the bundle's own `data.json` and mapping the
entries the decision's reasons point at to `file:line` (`source_map.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engram_memory.contract.exceptions import PolicyUnavailable
from engram_memory.policy.authoring.calls import (
    Binding,
    PolicyQuery,
    ToolCall,
    plan_call,
    summarize,
)
from engram_memory.policy.authoring.source_map import DataPath, SourceMap
from engram_memory.policy.engine import BundleIdentity, PolicyEngine

_RETENTION_KEYS = {
    "ceiling_ms": "retention ceiling",
    "default_ttl_ms": "retention default TTL",
    "retain": "who may ask to retain derivatives",
}
# The retention reasons each compiled key can produce.
_RETENTION_REASONS = {
    "ceiling_ms": {"expires_beyond_ceiling", "expires_within_ceiling", "ceiling_applied"},
    "default_ttl_ms": {"default_ttl_applied"},
    "retain": {"retain_permitted", "retain_not_permitted"},
}


def _obj(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _names(values: object) -> str:
    return ", ".join(str(v) for v in values) if isinstance(values, list) else str(values)


class Attribution:
    """Finds the YAML entries (file:line) a decision's reasons point at."""

    def __init__(self, data: Mapping[str, Any], sources: SourceMap | None) -> None:
        self._tenants = _obj(_obj(_obj(data.get("engram")).get("config")).get("tenants"))
        self._sources = sources

    def classifiers(self, binding: Binding) -> list[Mapping[str, Any]]:
        """The compiled content classifier definitions of the binding's workspace."""
        tenant = _obj(self._tenants.get(binding.tenant))
        ws = _obj(_obj(tenant.get("workspaces")).get(binding.workspace))
        found = ws.get("classifiers")
        return [_obj(c) for c in found] if isinstance(found, list) else []

    def _entry(self, why: str, path: DataPath) -> dict[str, str]:
        if self._sources is None:
            return {"why": why, "source": "(no source map)"}
        # An entry that is not written (no grant for this principal) is shown at the
        # nearest enclosing one that is (the workspace).
        found = self._sources.get(path)
        while found is None and path:
            path = path[:-1]
            found = self._sources.get(path)
        return {"why": why, "source": str(found) if found else "-"}

    def entries(self, query: PolicyQuery, result: Mapping[str, Any]) -> list[dict[str, str]]:
        """The entries behind `result`, each with why it matters."""
        inp, domain = query.input, query.domain
        tenant_name, ws_name = str(inp.get("tenant")), str(inp.get("workspace"))
        tenant = _obj(self._tenants.get(tenant_name))
        ws = _obj(_obj(tenant.get("workspaces")).get(ws_name))
        t_base: DataPath = ("tenants", tenant_name)
        base: DataPath = (*t_base, "workspaces", ws_name)
        reasons = {str(r) for r in result.get("reasons", []) if isinstance(r, str)}
        out: list[dict[str, str]] = []
        if not tenant:
            return [{"why": f"tenant {tenant_name!r} is in no policy file", "source": "-"}]
        if not ws:
            return [self._entry(f"workspace {ws_name!r} is not in this tenant", t_base)]
        if "tenant_memory_disabled" in reasons:
            out.append(self._entry("tenant memory is off", (*t_base, "memory_enabled")))
        if "workspace_memory_disabled" in reasons:
            out.append(self._entry("workspace memory is off", (*base, "memory_enabled")))
        if domain == "maintenance":
            operator = str(inp.get("operator"))
            if operator in _obj(_obj(ws.get("maintenance")).get("operators")):
                path: DataPath = (*base, "maintenance", "operators", operator)
                return [*out, self._entry(f"authorities of {operator}", path)]
            return [*out, self._entry(f"{operator} is not an operator here", base)]
        if domain in {"discovery", "authz"}:
            out += self._grants(ws, base, inp, domain, result)
        if domain == "confirmation":
            if "always_required" in reasons:
                out.append({"why": "withdraw and forget always need confirmation", "source": "-"})
            tool = str(inp.get("tool"))
            requires = _obj(_obj(ws.get("confirmation")).get("require")).get(tool)
            for index, _ in enumerate(requires if isinstance(requires, list) else []):
                path = (*base, "confirmation", "require", tool, index)
                out.append(self._entry(f"confirmation selector for {tool}", path))
            if "approved" in result:
                out += self._approval(ws, base, tool, result)
            if "ttl_seconds" in _obj(ws.get("confirmation")):
                out.append(self._entry("confirmation TTL", (*base, "confirmation", "ttl_seconds")))
        if domain == "retention":
            rules = _obj(ws.get("retention"))
            for key, why in _RETENTION_KEYS.items():
                if key in rules and reasons & _RETENTION_REASONS[key]:
                    out.append(self._entry(why, (*base, "retention", key)))
        if domain == "reconciliation":
            consented = _obj(_obj(ws.get("reconciliation")).get("consented_families"))
            for family in inp.get("family_refs", []) or []:
                if family in consented:
                    path = (*base, "reconciliation", "consented_families", str(family))
                    out.append(self._entry(f"{family} is consented", path))
                else:
                    out.append(self._entry(f"{family} is not consented", (*base, "reconciliation")))
        if domain == "semantic":
            purposes = _obj(_obj(ws.get("semantic_search")).get("purposes"))
            purpose = str(inp.get("purpose_ref"))
            if purpose in purposes:
                path = (*base, "semantic_search", "purposes", purpose)
                out.append(self._entry(f"{purpose} may use the semantic channel", path))
            else:
                why = f"{purpose} is not listed for the semantic channel"
                out.append(self._entry(why, (*base, "semantic_search")))
        if domain == "admission":
            out += self._admission(ws, base, reasons)
        return out

    def _approval(
        self, ws: Mapping[str, Any], base: DataPath, tool: str, result: Mapping[str, Any]
    ) -> list[dict[str, str]]:
        """The four-eyes rules for `tool`: each one that refused, or that let it through."""
        refused = set(result.get("refused_by") or [])
        rules = _obj(ws.get("confirmation")).get("approval")
        out = []
        for index, rule in enumerate(rules if isinstance(rules, list) else []):
            if tool in _obj(rule).get("tools", []):
                name = str(_obj(rule).get("name"))
                verdict = "refused the approver" if name in refused else "lets the approver through"
                path: DataPath = (*base, "confirmation", "approval", index)
                out.append(self._entry(f"approval rule {name} {verdict}", path))
        return out

    def _grants(
        self,
        ws: Mapping[str, Any],
        base: DataPath,
        inp: Mapping[str, Any],
        domain: str,
        result: Mapping[str, Any],
    ) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        purpose = inp.get("purpose_ref")
        holders = [("principals", str(inp.get("principal")))]
        holders += [("groups", str(g)) for g in inp.get("groups", []) or []]
        held: set[str] = set()
        for kind, who in holders:
            grants = _obj(ws.get(kind)).get(who)
            for index, grant in enumerate(grants if isinstance(grants, list) else []):
                purposes = _obj(grant).get("purposes")
                if purposes and purpose not in purposes:
                    why = f"grant to {who} (not for {purpose})"
                else:
                    why = f"grant to {who}: roles {_names(_obj(grant).get('roles'))}"
                    held.update(str(r) for r in _obj(grant).get("roles", []))
                out.append(self._entry(why, (*base, kind, who, index)))
        if not out:
            out.append(self._entry(f"no grant names {holders[0][1]}", (*base, "principals")))
        roles = _obj(ws.get("roles"))
        for role in sorted(held):
            tools = roles.get(role, [])
            if domain == "discovery" or inp.get("tool") in tools:
                out.append(self._entry(f"role {role}: {_names(tools)}", (*base, "roles", role)))
        if domain == "authz":
            for reason in result.get("reasons", []):
                name = str(reason).removeprefix("redaction_rule:")
                for index, rule in enumerate(ws.get("redaction", []) or []):
                    if str(reason).startswith("redaction_rule:") and _obj(rule).get("name") == name:
                        out.append(
                            self._entry(f"redaction rule {name}", (*base, "redaction", index))
                        )
        if domain == "discovery":
            names = {_obj(limit).get("name") for limit in result.get("rate_limits", []) or []}
            for index, limit in enumerate(ws.get("rate_limits", []) or []):
                if _obj(limit).get("name") in names:
                    why = f"rate limit {_obj(limit).get('name')}"
                    out.append(self._entry(why, (*base, "rate_limits", index)))
        return out

    def _admission(
        self, ws: Mapping[str, Any], base: DataPath, reasons: set[str]
    ) -> list[dict[str, str]]:
        if "admission" not in ws:
            return [self._entry("no admission policy in this workspace", base)]
        out = [self._entry("admission policy", (*base, "admission"))]
        for prefix, key in (
            ("reject_", "reject"),
            ("adjudicate_", "adjudicate"),
            ("accept_", "accept"),
            ("attestation_", "accept"),
            ("otherwise", "otherwise"),
        ):
            if any(reason.startswith(prefix) for reason in reasons):
                out.append(self._entry(f"admission {key}", (*base, "admission", key)))
        classifiers = ws.get("classifiers")
        for index, classifier in enumerate(classifiers if isinstance(classifiers, list) else []):
            name = _obj(classifier).get("name")
            if f"adjudicate_classifier:{name}" in reasons:
                why = f"content classifier {name} matched the text"
                out.append(self._entry(why, (*base, "classifiers", index)))
        return out


def verdict(domains: list[dict[str, Any]]) -> str:
    """What the service would do with the call, in its order (SPEC §1.8)."""
    for item in domains:
        summary, domain = item["summary"], item["domain"]
        if "error" in summary:
            return f"POLICY_UNAVAILABLE ({domain}: {summary['error']})"
        if domain == "discovery" and not summary["allow"]:
            return "refused: the tool is not listed for this binding (unknown tool)"
        if domain == "confirmation" and summary.get("approved") is False:
            rules = ", ".join(summary.get("refused_by") or []) or "none"
            return f"gate_failed: the approver may not approve it (rules: {rules})"
        if domain in {"authz", "retention", "reconciliation"} and not summary["allow"]:
            return f"UNAUTHORIZED ({domain} denies)"
        if domain == "maintenance":
            return "allowed" if summary["allow"] else "refused (maintenance authority)"
        if domain == "admission":
            return f"admission outcome: {summary['outcome']}"
    confirm = [i["summary"] for i in domains if i["domain"] == "confirmation"]
    if confirm and confirm[0]["required"]:
        return f"allowed once the host confirms it (TTL {confirm[0]['ttl_seconds']} s)"
    return "allowed"


def evaluate(engine: PolicyEngine, query: PolicyQuery) -> tuple[object, str | None, str]:
    """(result, revision the engine reports, why it could not answer). A result of None
    when the engine cannot answer: the service would answer POLICY_UNAVAILABLE."""
    try:
        answer = engine.evaluate(query.path, query.input)
    except PolicyUnavailable as exc:
        return None, None, exc.detail or "the engine did not answer"
    return answer.result, answer.revision, ""


def explain_call(
    engine: PolicyEngine,
    identity: BundleIdentity,
    attribution: Attribution,
    binding: Binding,
    call: ToolCall,
) -> dict[str, Any]:
    """The explanation of one call: per domain the input, result, summary and sources.

    Raises:
        CallError: the binding lacks what the call needs.
    """
    domains: list[dict[str, Any]] = []
    for query in plan_call(binding, call, attribution.classifiers(binding)):
        result, revision, failure = evaluate(engine, query)
        stale = revision is not None and revision != identity.revision
        summary = summarize(query.domain, call.tool, result)
        if failure:
            summary = {"error": f"no answer: {failure}", "reasons": []}
        elif stale:
            summary = {"error": f"engine serves revision {revision} (POLICY_STALE)", "reasons": []}
        domains.append(
            {
                "domain": query.domain,
                "entrypoint": query.path,
                "input": query.input,
                "result": result,
                "summary": summary,
                "sources": attribution.entries(query, _obj(result)),
            }
        )
    return {
        "bundle_revision": identity.revision,
        "engine": engine.engine_id,
        "binding": binding.model_dump(exclude_none=True),
        "call": call.model_dump(exclude_none=True),
        "verdict": verdict(domains),
        "domains": domains,
    }
