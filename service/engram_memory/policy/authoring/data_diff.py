"""Differences between two compiled policy data documents, said in the YAML's terms.

Both sides of `policy diff` may be built bundles, which carry only the compiled `data.json`,
so the comparison runs on the compiled document (`data_compiler.py`) and translates its
keys back to what an author wrote: `grant user:bob gained role contributor`, `redaction rule
support-case-view: max_packet_bytes 65536 -> 131072`, `retention.ceiling 365d -> 180d`. A key
this module does not know yet (a newer schema) is still reported, under its own name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Compiled key -> (how one entry of that mapping is named, what its list items are called).
_ENTRY_LABELS: dict[str, str] = {
    "principals": "grant",  # compiled grants, keyed by principal
    "groups": "grant",  # grants by group (group:<name>), when the schema has them
    "roles": "role",
    "operators": "operator",
    "require": "confirmation for",
}
_ITEM_NAMES: dict[str, str] = {
    "roles": "role",
    "purposes": "purpose",
    "principals": "principal",
    "allowed_fields": "field",
    "tools": "tool",
    "consented_families": "family",
    "never_store_patterns": "pattern",
    "evidence_ref_prefixes": "prefix",
    "source_ref_prefixes": "prefix",
    "component_kinds": "kind",
    "operators": "operator",
    "groups": "group",
    "authorities": "authority",
    "terms": "term",
    "kinds": "kind",
}
# What the values of an entry mapping hold, named for `_ITEM_NAMES`.
_ENTRY_VALUES: dict[str, str] = {"roles": "tools", "operators": "authorities"}
# Keys the compiler renamed: compiled name -> the YAML name and how its value is written.
_RENAMED: dict[str, str] = {
    "ceiling_ms": "ceiling",
    "default_ttl_ms": "default_ttl",
    "per_ms": "per",
    "redaction": "redaction rule",
    "rate_limits": "rate limit",
    "never_store_patterns": "never_store.patterns",
    "classifiers": "classifier",
}
# What one unnamed entry of a list is (a principal's grants, a tool's confirmation selectors).
_ENTRY_NOUNS: dict[str, str] = {
    "principals": "a grant",
    "groups": "a grant",
    "require": "a selector",
}
_UNITS: tuple[tuple[str, int], ...] = (
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
)


@dataclass(frozen=True, slots=True)
class DataChange:
    """One change: where (`tenant` or `tenant/workspace`, empty for the whole document),
    and what, in YAML terms."""

    scope: str
    change: str

    def __str__(self) -> str:
        return f"{self.scope}: {self.change}" if self.scope else self.change


def duration_text(milliseconds: int) -> str:
    """7776000000 -> `90d`: the largest unit that divides exactly, as authors write it."""
    for unit, size in _UNITS:
        if milliseconds and milliseconds % size == 0:
            return f"{milliseconds // size}{unit}"
    return f"{milliseconds}ms"


def _flow(value: object) -> str:
    """YAML flow style, as an author would write the value inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ", ".join(_flow_member(str(key), item) for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(item) for item in value) + "]"
    if isinstance(value, str):
        return value if value and value.strip() == value and "," not in value else json.dumps(value)
    return json.dumps(value)


def _flow_member(key: str, value: object) -> str:
    """`per: 1m`, not `per_ms: 60000`: milliseconds back to the duration the YAML wrote."""
    if key.endswith("_ms") and isinstance(value, int) and not isinstance(value, bool):
        return f"{key[:-3]}: {duration_text(value)}"
    return f"{key}: {_flow(value)}"


def _show(key: str, value: object) -> str:
    if key.endswith("_ms") and isinstance(value, int) and not isinstance(value, bool):
        return duration_text(value)
    if key == "consented_families" and isinstance(value, Mapping):
        value = sorted(value)
    if isinstance(value, str):
        return value
    return _flow(value)


def _is_set(value: object) -> bool:
    """Sorted unique string lists and `{name: true}` maps: the compiler's sets."""
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    if isinstance(value, Mapping):
        return bool(value) and all(item is True for item in value.values())
    return False


def _named_list(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, Mapping) and isinstance(item.get("name"), str) for item in value
    )


class _Differ:
    def __init__(self) -> None:
        self.changes: list[DataChange] = []

    def say(self, scope: str, label: str, text: str) -> None:
        self.changes.append(DataChange(scope, f"{label} {text}".strip() if label else text))

    def value(self, scope: str, label: str, key: str, old: object, new: object) -> None:
        """Compare the values of one key; `label` names it as the author would."""
        if old == new or (old is None and new in ({}, [])) or (new is None and old in ({}, [])):
            return
        if key in _ENTRY_LABELS and (old is None or new is None):
            # A whole map of grants (say `groups`, new in this schema) added or removed:
            # listed grant by grant, like any other change to it.
            old, new = (old, new) if old is not None else (_blank(new), new)
            old, new = (old, new) if new is not None else (old, _blank(old))
        if old is None or new is None:
            verb, shown = ("added:", new) if old is None else ("removed", None)
            self.say(scope, label, verb if shown is None else f"{verb} {_show(key, shown)}")
        elif (_is_set(old) or old in ([], {})) and (_is_set(new) or new in ([], {})):
            self._set(scope, label, key, old, new)
        elif isinstance(old, Mapping) and isinstance(new, Mapping):
            self._mapping(scope, label, key, old, new)
        elif (
            isinstance(old, list)
            and isinstance(new, list)
            and _named_list(old)
            and _named_list(new)
        ):
            self._named(scope, label, key, old, new)
        elif isinstance(old, list) and isinstance(new, list) and key in _ENTRY_LABELS:
            self._entries(scope, label, _ENTRY_NOUNS.get(key, "entry"), old, new)
        else:
            self.say(scope, label, f"{_show(key, old)} -> {_show(key, new)}")

    def _set(self, scope: str, label: str, key: str, old: object, new: object) -> None:
        before, after = set(_items(old)), set(_items(new))
        item = _ITEM_NAMES.get(key, "entry")
        parts = []
        if after - before:
            parts.append(f"gained {item} {', '.join(sorted(after - before))}")
        if before - after:
            parts.append(f"lost {item} {', '.join(sorted(before - after))}")
        self.say(scope, label, "; ".join(parts))

    def _mapping(
        self, scope: str, label: str, key: str, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> None:
        entry = _ENTRY_LABELS.get(key)
        for name in sorted(set(old) | set(new)):
            if entry is not None:
                child = f"{entry} {name}"
            else:
                shown = _RENAMED.get(name, name)
                child = f"{label}.{shown}" if label else shown
            if entry is not None and name not in new:
                self.say(scope, child, "removed")
            elif entry is not None and name not in old:
                self.say(scope, child, f"added: {_show(name, new[name])}")
            else:
                value_key = name if entry is None else _ENTRY_VALUES.get(key, key)
                self.value(scope, child, value_key, old.get(name), new.get(name))

    def _named(
        self,
        scope: str,
        label: str,
        key: str,
        old: Sequence[Mapping[str, Any]],
        new: Sequence[Mapping[str, Any]],
    ) -> None:
        """Lists of named rules (redaction, rate limits): by name, and their order."""
        kind = _RENAMED.get(key, label or key)
        before = {rule["name"]: rule for rule in old}
        after = {rule["name"]: rule for rule in new}
        for name in [rule["name"] for rule in old]:
            if name not in after:
                self.say(scope, f"{kind} {name}", "removed")
        for position, rule in enumerate(new):
            name = rule["name"]
            if name not in before:
                body = {field: value for field, value in rule.items() if field != "name"}
                # Only redaction is ordered (first match wins); rate limits all apply.
                where = f" at position {position + 1}" if key == "redaction" else ""
                self.say(scope, f"{kind} {name}", f"added{where}: {_flow(body)}")
                continue
            for field in sorted(set(before[name]) | set(rule)):
                if field != "name":
                    self.value(
                        scope,
                        f"{kind} {name}: {_RENAMED.get(field, field)}",
                        field,
                        before[name].get(field),
                        rule.get(field),
                    )
        kept_old = [name for name in before if name in after]
        kept_new = [name for name in after if name in before]
        if kept_old != kept_new and key == "redaction":
            self.say(
                scope, "redaction rules", f"reordered: {', '.join(kept_new)} (first match wins)"
            )

    def _entries(
        self, scope: str, label: str, noun: str, old: Sequence[object], new: Sequence[object]
    ) -> None:
        """Unnamed entries (several grants of one principal): one grant each side compares
        field by field; otherwise entries removed and added."""
        if len(old) == 1 and len(new) == 1:
            first, second = old[0], new[0]
            if isinstance(first, Mapping) and isinstance(second, Mapping):
                for field in sorted(set(first) | set(second)):
                    if field == "purposes" and (field not in first or field not in second):
                        shown = second.get(field) if field in second else None
                        self.say(
                            scope,
                            label,
                            "now limited to purposes " + _show(field, shown)
                            if shown is not None
                            else "no longer limited to purposes " + _show(field, first[field]),
                        )
                        continue
                    self.value(scope, label, field, first.get(field), second.get(field))
                return
        rendered_old = [_show("", entry) for entry in old]
        rendered_new = [_show("", entry) for entry in new]
        for entry in rendered_old:
            if entry not in rendered_new:
                self.say(scope, label, f"lost {noun} {entry}")
        for entry in rendered_new:
            if entry not in rendered_old:
                self.say(scope, label, f"gained {noun} {entry}")


def _items(value: object) -> list[str]:
    if isinstance(value, Mapping):
        return [str(key) for key in value]
    return [str(item) for item in value] if isinstance(value, list) else []


def _tenants(document: Mapping[str, Any]) -> Mapping[str, Any]:
    tenants = document.get("engram", {}).get("config", {}).get("tenants", {})
    return tenants if isinstance(tenants, Mapping) else {}


def _blank(value: object) -> object:
    """What an absent entry compares as: an empty value of the same kind."""
    if isinstance(value, Mapping):
        return {}
    if isinstance(value, list):
        return []
    return False if isinstance(value, bool) else None


def _baseline(body: object) -> dict[str, Any]:
    """An added tenant or workspace is compared with an empty one, so its content is listed
    entry by entry (`grant user:eve added: ...`) like any other change."""
    if not isinstance(body, Mapping):
        return {}
    return {key: _blank(value) for key, value in body.items()}


def diff_data(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[DataChange]:
    """Every difference between two compiled data documents, tenant by tenant, workspace by
    workspace, in YAML terms; empty when they are equal. An added tenant or workspace is
    listed with its content; a removed one in one line."""
    differ = _Differ()
    before, after = _tenants(old), _tenants(new)
    for tenant in sorted(set(before) | set(after)):
        if tenant not in after:
            differ.say("", f"tenant {tenant}", "removed")
            continue
        new_tenant = after[tenant]
        if tenant not in before:
            differ.say("", f"tenant {tenant}", "added")
        old_tenant = before.get(tenant, _baseline(new_tenant))
        for key in sorted(set(old_tenant) | set(new_tenant)):
            if key != "workspaces":
                differ.value(tenant, key, key, old_tenant.get(key), new_tenant.get(key))
        old_ws, new_ws = old_tenant.get("workspaces") or {}, new_tenant.get("workspaces") or {}
        for name in sorted(set(old_ws) | set(new_ws)):
            scope = f"{tenant}/{name}"
            if name not in new_ws:
                differ.say(scope, "workspace", "removed")
                continue
            if name not in old_ws:
                differ.say(scope, "workspace", "added")
            base = old_ws.get(name, _baseline(new_ws[name]))
            for key in sorted(set(base) | set(new_ws[name])):
                label = _RENAMED.get(key, key)
                differ.value(scope, label, key, base.get(key), new_ws[name].get(key))
    return differ.changes
