"""Where each entry of the compiled policy data came from: `file:line` of the YAML.

The bundle's `data.json` carries no source positions (they would change the content digest
on every reformat); this side map, rebuilt from `policies/` whenever it is needed, lets
`policy explain` name the YAML entries behind a decision. Keys are compiled data paths
under `data.engram.config`, e.g. `("tenants", "acme", "workspaces", "support", "principals",
"user:bob", 0)` for the first grant to `user:bob`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_memory._internal.yaml_source import Path_, YamlSource, dotted, read_yaml
from engram_memory.policy.authoring.data import load_policies, policy_files

DataPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """A YAML entry: its file, line and dotted path in the file."""

    file: str
    line: int
    path: str
    # False: the key is not written in the file (the line is its parent's; a default applies).
    present: bool = True

    def __str__(self) -> str:
        unset = "" if self.present else " (not set: default applies)"
        return f"{self.file}:{self.line}: {self.path}{unset}"


class SourceMap:
    """Compiled data path -> the YAML entry it was compiled from."""

    def __init__(self) -> None:
        self._entries: dict[DataPath, SourceLocation] = {}

    def add(self, data_path: DataPath, source: YamlSource, yaml_path: Path_) -> None:
        self._entries[data_path] = SourceLocation(
            source.name, source.line_of(yaml_path), dotted(yaml_path), yaml_path in source.lines
        )

    def get(self, data_path: DataPath) -> SourceLocation | None:
        return self._entries.get(data_path)

    def __len__(self) -> int:
        return len(self._entries)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _map_workspace(
    out: SourceMap, source: YamlSource, doc: Mapping[str, Any], name: str, ws: Mapping[str, Any]
) -> None:
    base: DataPath = ("tenants", str(doc["tenant"]), "workspaces", name)
    yaml_base: Path_ = ("workspaces", name)
    out.add(base, source, yaml_base)
    out.add((*base, "memory_enabled"), source, (*yaml_base, "memory_enabled"))
    for role in _mapping(ws.get("roles")):
        out.add((*base, "roles", role), source, (*yaml_base, "roles", role))
    seen: dict[tuple[str, str], int] = {}
    for position, grant in enumerate(_list(ws.get("grants"))):
        grant = _mapping(grant)
        # A grant names a principal or (issue 10 item 5) a group; compiled per key.
        kind = "groups" if "group" in grant else "principals"
        who = str(grant.get("group", grant.get("principal", "")))
        index = seen.get((kind, who), 0)
        seen[(kind, who)] = index + 1
        out.add((*base, kind, who, index), source, (*yaml_base, "grants", position))
    for position, _rule in enumerate(_list(ws.get("redaction"))):
        out.add((*base, "redaction", position), source, (*yaml_base, "redaction", position))
    retention_owner: Path_ = yaml_base if "retention" in ws else ()
    if "retention" in ws or "retention" in doc:
        retention = (*retention_owner, "retention")
        out.add((*base, "retention"), source, retention)
        for key, compiled in (
            ("ceiling", "ceiling_ms"),
            ("default_ttl", "default_ttl_ms"),
            ("retain", "retain"),
        ):
            out.add((*base, "retention", compiled), source, (*retention, key))
    families = _list(_mapping(ws.get("reconciliation")).get("consented_families"))
    for position, family in enumerate(families):
        out.add(
            (*base, "reconciliation", "consented_families", str(family)),
            source,
            (*yaml_base, "reconciliation", "consented_families", position),
        )
    purposes = _list(_mapping(ws.get("semantic_search")).get("purposes"))
    out.add((*base, "semantic_search"), source, (*yaml_base, "semantic_search"))
    for position, purpose in enumerate(purposes):
        out.add(
            (*base, "semantic_search", "purposes", str(purpose)),
            source,
            (*yaml_base, "semantic_search", "purposes", position),
        )
    confirmation = _mapping(ws.get("confirmation"))
    out.add(
        (*base, "confirmation", "ttl_seconds"), source, (*yaml_base, "confirmation", "ttl_seconds")
    )
    per_tool: dict[str, int] = {}
    for position, require in enumerate(_list(confirmation.get("require"))):
        tool = str(_mapping(require).get("tool", ""))
        index = per_tool.get(tool, 0)
        per_tool[tool] = index + 1
        out.add(
            (*base, "confirmation", "require", tool, index),
            source,
            (*yaml_base, "confirmation", "require", position),
        )
    for position, _rule in enumerate(_list(confirmation.get("approval"))):
        out.add(
            (*base, "confirmation", "approval", position),
            source,
            (*yaml_base, "confirmation", "approval", position),
        )
    admission = _mapping(ws.get("admission"))
    out.add((*base, "admission"), source, (*yaml_base, "admission"))
    for key in admission:
        out.add((*base, "admission", key), source, (*yaml_base, "admission", key))
    for operator in _mapping(_mapping(ws.get("maintenance")).get("operators")):
        out.add(
            (*base, "maintenance", "operators", operator),
            source,
            (*yaml_base, "maintenance", "operators", operator),
        )
    limits = sorted(
        enumerate(_list(ws.get("rate_limits"))), key=lambda item: str(_mapping(item[1]).get("name"))
    )
    for compiled_index, (position, _limit) in enumerate(limits):
        out.add(
            (*base, "rate_limits", compiled_index), source, (*yaml_base, "rate_limits", position)
        )
    # Compiled: the tenant's classifiers and the workspace's, sorted by name.
    tenant_level: Path_ = ()
    classifiers = [
        (tenant_level, position, c) for position, c in enumerate(_list(doc.get("classifiers")))
    ]
    classifiers += [(yaml_base, p, c) for p, c in enumerate(_list(ws.get("classifiers")))]
    classifiers.sort(key=lambda item: str(_mapping(item[2]).get("name")))
    for compiled_index, (owner, position, _classifier) in enumerate(classifiers):
        out.add((*base, "classifiers", compiled_index), source, (*owner, "classifiers", position))
    ceiling_owner: Path_ = yaml_base if "response_ceiling_bytes" in ws else ()
    out.add((*base, "response_ceiling_bytes"), source, (*ceiling_owner, "response_ceiling_bytes"))


def _shown(path: Path) -> str:
    """`path` relative to the working directory when under it (what an author types)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def build_source_map(policies_dir: Path | str) -> SourceMap:
    """The source map of every tenant file in `policies_dir` (validated first).

    Raises:
        PolicyDataError: the policy data is invalid.
    """
    load_policies(policies_dir)
    out = SourceMap()
    for path in policy_files(Path(policies_dir)):
        source = YamlSource(_shown(path))
        doc = _mapping(read_yaml(path, source))
        tenant = str(doc["tenant"])
        out.add(("tenants", tenant), source, ("tenant",))
        out.add(("tenants", tenant, "memory_enabled"), source, ("memory_enabled",))
        for name, ws in _mapping(doc.get("workspaces")).items():
            _map_workspace(out, source, doc, str(name), _mapping(ws))
    return out
