"""`engram-memory policy grant`: give a principal a role in a workspace by editing the tenant's
YAML the way an author would, so that the file keeps its comments and layout.

The edit is textual (a grant entry appended to the workspace's `grants:` list, or the list
created), then proven: the edited directory must load exactly as before plus this grant
(`load_policies`), or nothing is written. The caller shows the diff and rebuilds the bundle.
"""

from __future__ import annotations

import difflib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from engram_memory._internal.yaml_source import YamlSource, read_yaml
from engram_memory.contract.exceptions import GrantRefused, PolicyDataError
from engram_memory.policy.authoring.data import Grant, TenantPolicy, load_policies, policy_files


@dataclass(frozen=True)
class GrantEdit:
    """The tenant file to change, its text before and after (equal: already granted)."""

    path: Path
    before: str
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.before.splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                fromfile=f"a/{self.path.name}",
                tofile=f"b/{self.path.name}",
            )
        )


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _entry_lines(grant: Grant, dash_indent: int) -> list[str]:
    pad = " " * dash_indent
    lines = [f"{pad}- principal: {json.dumps(grant.principal)}\n"]
    lines.append(f"{pad}  roles: [{', '.join(grant.roles)}]\n")
    if grant.purposes:
        lines.append(f"{pad}  purposes: [{', '.join(json.dumps(p) for p in grant.purposes)}]\n")
    return lines


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The index of the first content line after `start` indented at most `indent` (the end
    of the block opened at `start`), trailing blank and comment lines left outside it."""
    end = start + 1
    last_content = start
    while end < len(lines):
        if _is_content(lines[end]):
            if _indent(lines[end]) <= indent:
                break
            last_content = end
        end += 1
    return last_content + 1


def _edited_text(text: str, source: YamlSource, workspace: str, grant: Grant, count: int) -> str:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if count:
        last_item = source.line_of(("workspaces", workspace, "grants", count - 1)) - 1
        dash = lines[last_item].index("-")
        end = _block_end(lines, last_item, dash)
        return "".join([*lines[:end], *_entry_lines(grant, dash), *lines[end:]])
    key_line = source.line_of(("workspaces", workspace)) - 1
    key_indent = _indent(lines[key_line])
    children = [i for i in range(key_line + 1, len(lines)) if _is_content(lines[i])]
    if not children or _indent(lines[children[0]]) <= key_indent:
        raise GrantRefused(
            f"{source.name}:{key_line + 1}: workspace {workspace!r} is not a block mapping: "
            "add its grants by hand (docs/compliance/policy-data.md)"
        )
    child = _indent(lines[children[0]])
    block = [f"{' ' * child}grants:\n", *_entry_lines(grant, child + 2)]
    return "".join([*lines[: key_line + 1], *block, *lines[key_line + 1 :]])


def _tenant_file(policies_dir: Path, tenant: str) -> tuple[Path, TenantPolicy]:
    try:
        tenants = load_policies(policies_dir)
    except PolicyDataError as exc:
        raise GrantRefused(
            "the policy data is invalid; fix it first (`engram-memory policy validate`):\n"
            + "\n".join(exc.problems)
        ) from None
    if tenant not in tenants:
        known = ", ".join(sorted(tenants)) or "none"
        raise GrantRefused(f"no tenant {tenant!r} in {policies_dir} (tenants: {known})")
    for path in policy_files(policies_dir):
        source = YamlSource(str(path))
        document = read_yaml(path, source)
        if isinstance(document, dict) and document.get("tenant") == tenant:
            return path, tenants[tenant]
    raise GrantRefused(f"no file of {policies_dir} defines tenant {tenant!r}")  # pragma: no cover


def plan_grant(
    policies_dir: Path,
    *,
    tenant: str,
    workspace: str,
    principal: str,
    role: str,
    purposes: list[str] | None = None,
) -> GrantEdit:
    """The edit that grants `role` to `principal` in `tenant`/`workspace`, proven to load.

    Raises:
        GrantRefused: invalid principal or purpose, unknown tenant, workspace or role, data
            that is already invalid, or a layout the edit cannot follow.
    """
    try:
        grant = Grant(principal=principal, roles=[role], purposes=purposes or None)
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in problem["loc"]) or "grant"
        raise GrantRefused(f"{where}: {problem['msg']}") from None
    path, policy = _tenant_file(policies_dir, tenant)
    if workspace not in policy.workspaces:
        known = ", ".join(sorted(policy.workspaces)) or "none"
        raise GrantRefused(
            f"tenant {tenant!r} has no workspace {workspace!r} (workspaces: {known})"
        )
    current = policy.workspaces[workspace]
    if role not in current.roles:
        known = ", ".join(sorted(current.roles)) or "none"
        raise GrantRefused(
            f"workspace {tenant}/{workspace} defines no role {role!r} (roles: {known})"
        )
    before = path.read_text(encoding="utf-8")
    if any(
        existing.principal == principal
        and role in existing.roles
        and existing.purposes == grant.purposes
        for existing in current.grants
    ):
        return GrantEdit(path, before, before)
    source = YamlSource(str(path))
    read_yaml(path, source)
    after = _edited_text(before, source, workspace, grant, len(current.grants))
    _prove(policies_dir, path, after, tenant, workspace, grant, len(current.grants))
    return GrantEdit(path, before, after)


def _prove(
    policies_dir: Path,
    path: Path,
    after: str,
    tenant: str,
    workspace: str,
    grant: Grant,
    count: int,
) -> None:
    """The edited directory loads, and the workspace gained exactly this grant."""
    with tempfile.TemporaryDirectory(prefix="engram-grant-") as scratch:
        copy = Path(scratch) / "policies"
        copy.mkdir()
        for other in policy_files(policies_dir):
            shutil.copyfile(other, copy / other.name)
        (copy / path.name).write_text(after, encoding="utf-8")
        try:
            grants = load_policies(copy)[tenant].workspaces[workspace].grants
        except (PolicyDataError, KeyError):
            grants = []
    if len(grants) != count + 1 or grants[-1] != grant:
        raise GrantRefused(
            f"{path}: the grant could not be added without changing anything else; "
            "add it by hand (docs/compliance/policy-data.md)"
        )


def apply_grant(edit: GrantEdit) -> None:
    """Write the edited file in place of the old one (atomic rename, same mode)."""
    if not edit.changed:
        return
    scratch = edit.path.with_name(f".{edit.path.name}.grant-tmp")
    scratch.write_text(edit.after, encoding="utf-8")
    shutil.copymode(edit.path, scratch)
    scratch.replace(edit.path)


def restore(edit: GrantEdit) -> None:
    """Put the file back as it was (the bundle built from the edit failed)."""
    if edit.changed:
        edit.path.write_text(edit.before, encoding="utf-8")
