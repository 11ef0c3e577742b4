"""Where in a source tree's YAML a `policy diff` data change sits, as `file:line`.

A bundle carries only compiled data, so only a source tree side can point back at its YAML.
The change's scope names the tenant file and workspace; its subject (`grant user:bob`,
`redaction rule x`, `rate limit y`, `role r`, `operator human:o`, or a dotted key such as
`retention.ceiling`) names the entry. A value the workspace inherits from its tenant, or an
entry the side does not have, is located at the nearest enclosing key the file has.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from engram_memory._internal.yaml_source import Path_, YamlSource, read_yaml
from engram_memory.policy.authoring.data import policy_files
from engram_memory.policy.authoring.data_diff import DataChange

# Subject prefix in a change -> (list key in the workspace, the item field that names it).
_LISTED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("grant ", "grants", ("principal", "group")),
    ("redaction rule ", "redaction", ("name",)),
    ("rate limit ", "rate_limits", ("name",)),
)
_KEYED: tuple[tuple[str, Path_], ...] = (
    ("role ", ("roles",)),
    ("operator ", ("maintenance", "operators")),
    ("confirmation for ", ("confirmation", "require")),
)


class SourceLocator:
    """The tenant files of one source tree, read once, answering `file:line` per change."""

    def __init__(self, policies_dir: Path) -> None:
        self._files: dict[str, tuple[YamlSource, Mapping[str, object]]] = {}
        for path in policy_files(policies_dir):
            source = YamlSource(str(path))
            document = read_yaml(path, source)
            if isinstance(document, Mapping) and isinstance(document.get("tenant"), str):
                self._files.setdefault(document["tenant"], (source, document))

    def locate(self, change: DataChange) -> str | None:
        """`policies/acme.yaml:41` for a change in this tree, None if the tree lacks it."""
        tenant, _, workspace = change.scope.partition("/")
        if not tenant:
            tenant = change.change.split(" ")[1] if change.change.startswith("tenant ") else ""
        found = self._files.get(tenant)
        if found is None:
            return None
        source, document = found
        loc: Path_ = ("workspaces", workspace) if workspace else ()
        if workspace:
            loc = (*loc, *self._entry(document, workspace, change.change))
        elif not change.change.startswith("tenant "):
            loc = (change.change.split(" ")[0],)
        return f"{source.name}:{source.line_of(loc)}"

    @staticmethod
    def _entry(document: Mapping[str, object], workspace: str, text: str) -> Path_:
        workspaces = document.get("workspaces")
        body = workspaces.get(workspace) if isinstance(workspaces, Mapping) else None
        if not isinstance(body, Mapping):
            return ()
        for prefix, key, fields in _LISTED:
            if text.startswith(prefix):
                name = text[len(prefix) :].split(" ")[0].rstrip(":")
                items = body.get(key)
                for index, item in enumerate(items if isinstance(items, list) else ()):
                    if isinstance(item, Mapping) and name in (item.get(f) for f in fields):
                        # `redaction rule x: max_packet_bytes ...`: that field's own line.
                        rest = text[len(prefix) + len(name) :]
                        field = rest[2:].split(" ")[0] if rest.startswith(": ") else ""
                        return (key, index, field) if field else (key, index)
                return (key,)
        for prefix, path in _KEYED:
            if text.startswith(prefix):
                return (*path, text[len(prefix) :].split(" ")[0].rstrip(":"))
        return tuple(text.split(" ")[0].rstrip(":").split("."))
