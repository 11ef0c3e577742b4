"""`policy effective`: everything one binding may do, each answer evaluated by the engine.

For each of the six tools the calls of `explain_call` are evaluated (listed? allowed? under
which grants and roles, with which redaction, behind a confirmation?); for capture also the
retention it gets (default expiry, `retain`, the ceiling) and the families it may reconcile;
and, for a host operator, its maintenance authority. The Python only picks questions and
reads answers: every verdict comes from the policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from engram_memory.contract.classifiers import COMPONENT_KINDS
from engram_memory.contract.types import ToolName, format_instant, parse_instant
from engram_memory.policy.authoring.calls import DEFAULT_NOW, Binding, ToolCall, parse_call
from engram_memory.policy.authoring.explain import Attribution, explain_call
from engram_memory.policy.engine import BundleIdentity, PolicyEngine

_CENTURY_MS = 100 * 365 * 86_400_000


def _call(**fields: Any) -> ToolCall:
    return parse_call(fields)


def _domain(explanation: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for item in explanation["domains"]:
        if item["domain"] == name:
            found: Mapping[str, Any] = item
            return found
    return {}


def _tool_row(explanation: Mapping[str, Any]) -> dict[str, Any]:
    discovery, authz = _domain(explanation, "discovery"), _domain(explanation, "authz")
    confirmation = _domain(explanation, "confirmation")
    result = _mapping(authz.get("result"))
    row: dict[str, Any] = {
        "listed": discovery["summary"].get("allow") is True,
        "allowed": authz["summary"].get("allow") is True,
        "reasons": authz["summary"].get("reasons", []),
        "because": [s for s in authz["sources"] if s["why"].startswith(("grant", "role", "no "))],
    }
    if row["allowed"]:
        row["redaction"] = {
            "rule": authz["summary"].get("redaction_rule"),
            **dict(_mapping(result.get("redaction"))),
        }
        row["response_ceiling_bytes"] = result.get("response_ceiling_bytes")
    if confirmation:
        row["confirmation"] = {
            "required": confirmation["summary"].get("required"),
            "ttl_seconds": confirmation["summary"].get("ttl_seconds"),
        }
    return row


def _redaction_by_classifier(
    ask: Callable[[ToolCall], dict[str, Any]],
    tool: str,
    row: Mapping[str, Any],
    classifiers: list[Any],
) -> dict[str, Any]:
    """`redaction_when_matched`: for each classifier whose match alone changes the redaction
    of a record this binding reads, that redaction (rule and allowlist)."""
    changed: dict[str, Any] = {}
    for classifier in classifiers:
        name = str(_mapping(classifier).get("name"))
        asked = _tool_row(ask(_call(tool=tool, classifiers={"primary": [name]})))
        if asked.get("redaction") != row.get("redaction"):
            changed[name] = asked.get("redaction")
    return {"redaction_when_matched": changed} if changed else {}


def _classifier_row(classifier: Mapping[str, Any]) -> dict[str, Any]:
    sort = next((key for key in ("terms", "regex", "detector") if key in classifier), "?")
    if sort == "detector":
        sort = f"detector {classifier['detector']}"
    elif sort == "terms":
        sort = f"{len(classifier['terms'])} terms"
    kinds = classifier.get("kinds") or list(COMPONENT_KINDS)
    return {"name": classifier.get("name"), "sort": sort, "kinds": kinds}


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _retention(
    ask: Callable[[ToolCall], dict[str, Any]], binding: Binding, now_ms: int, families: list[str]
) -> dict[str, Any]:
    capture = ToolName.CAPTURE
    default = _domain(ask(_call(tool=capture)), "retention")
    retain = _domain(ask(_call(tool=capture, derivative_rule="retain")), "retention")

    def expiry_allowed(offset_ms: int) -> dict[str, Any]:
        at = format_instant(now_ms + offset_ms)
        return dict(_domain(ask(_call(tool=capture, expires_at=at)), "retention")["summary"])

    distant = expiry_allowed(_CENTURY_MS)
    expires = default["summary"].get("expires_at_ms")
    out: dict[str, Any] = {
        "default_expiry_ms": None if expires is None else expires - now_ms,
        "default_reasons": default["summary"].get("reasons", []),
        "retain_allowed": retain["summary"].get("allow") is True,
        "expiry_in_100_years": {
            "allowed": distant.get("allow") is True,
            "reasons": distant.get("reasons", []),
        },
        "ceiling_ms": _latest_expiry(expiry_allowed) if distant.get("allow") is False else None,
        "sources": default.get("sources", []),
    }
    consented = []
    for family in families:
        asked = ask(_call(tool=capture, family_refs=[family]))
        if _domain(asked, "reconciliation")["summary"].get("allow") is True:
            consented.append(family)
    out["consented_families"] = consented
    return out


def _latest_expiry(expiry_allowed: Callable[[int], dict[str, Any]]) -> int | None:
    """The largest expiry offset (ms after capture) the policy accepts, found by bisection
    over its own answers (at most ~42 evaluations); None if even 1 ms is refused."""
    low, high = 0, _CENTURY_MS  # low: accepted (or 0), high: refused
    if expiry_allowed(1).get("allow") is not True:
        return None
    while high - low > 1:
        middle = (low + high) // 2
        if expiry_allowed(middle).get("allow") is True:
            low = middle
        else:
            high = middle
    return low


def effective_permissions(
    engine: PolicyEngine,
    identity: BundleIdentity,
    attribution: Attribution,
    binding: Binding,
    *,
    operator: str | None = None,
    candidate_families: list[str] | None = None,
) -> dict[str, Any]:
    """What `binding` may do under the bundle `engine` serves.

    `candidate_families`: families to ask reconciliation about (the caller passes those the
    policy data names; any other is refused anyway).

    Raises:
        CallError: the binding lacks a principal or a purpose.
    """

    def ask(call: ToolCall) -> dict[str, Any]:
        return explain_call(engine, identity, attribution, binding, call)

    now_ms = parse_instant(DEFAULT_NOW)
    tools = {tool: _tool_row(ask(_call(tool=tool))) for tool in ToolName}
    listing = _domain(ask(_call(tool=ToolName.SEARCH)), "discovery")
    listing_result = _mapping(listing.get("result"))
    out: dict[str, Any] = {
        "bundle_revision": identity.revision,
        "binding": binding.model_dump(exclude_none=True),
        "tools": tools,
        "rate_limits": listing_result.get("rate_limits", []),
        "never_store_patterns": len(listing_result.get("never_store_patterns", []) or []),
    }
    classifiers = listing_result.get("classifiers")
    if isinstance(classifiers, list) and classifiers:
        # Names, sorts and kinds: what a rule may name (the definitions are in the YAML).
        out["classifiers"] = [_classifier_row(_mapping(c)) for c in classifiers]
        for tool in (ToolName.SEARCH, ToolName.GET):
            if tools[tool]["allowed"]:
                tools[tool].update(_redaction_by_classifier(ask, tool, tools[tool], classifiers))
    if tools[ToolName.SEARCH]["allowed"]:
        semantic = _domain(ask(_call(tool=ToolName.SEARCH)), "semantic")
        out["semantic_search"] = {
            "allowed": semantic["summary"].get("allow") is True,
            "reasons": semantic["summary"].get("reasons", []),
        }
    if tools[ToolName.CAPTURE]["allowed"]:
        out["capture"] = _retention(ask, binding, now_ms, candidate_families or [])
    if operator is not None:
        out["maintenance"] = {
            authority: _domain(
                ask(_call(tool="maintenance", operator=operator, authority=authority)),
                "maintenance",
            )["summary"]
            for authority in ("read", "maintain")
        }
        out["maintenance"]["operator"] = operator
    return out
