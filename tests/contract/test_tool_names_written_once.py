"""The six tool names are spelled in one Python module (contract/types.py) and one Rego module.

Everything else derives them (`ToolName`, `MUTATING_TOOLS`, `READ_TOOLS`, the confirmation
groups), so adding or renaming a tool cannot leave a stale copy behind.
"""

from __future__ import annotations

import ast
from pathlib import Path

from engram_memory.contract.types import (
    ALWAYS_CONFIRMED_TOOLS,
    MUTATING_TOOLS,
    READ_TOOLS,
    SELECTABLE_CONFIRMED_TOOLS,
    ToolName,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "service" / "engram_memory"
REGO = ROOT / "rego" / "engram"
NAMES = frozenset(tool.value for tool in ToolName)


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the string constants that are module, class or function docstrings."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _spellings(source: str) -> list[int]:
    """Lines where `source` has a string constant, not a docstring, that is a tool name."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and id(node) not in skip
        and isinstance(node.value, str)
        and node.value in NAMES
    ]


def test_no_module_outside_contract_spells_a_tool_name() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "contract" not in path.relative_to(PACKAGE).parts
        for line in _spellings(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_the_scan_sees_a_spelled_name_and_passes_a_docstring() -> None:
    name = ToolName.GET.value
    source = f'"""{name}"""\n\n\ndef f():\n    """{name}"""\n    return "{name}"\n'
    assert _spellings(source) == [6]


def test_only_one_rego_module_spells_the_tool_names() -> None:
    spelling = {
        path.relative_to(REGO).as_posix()
        for path in REGO.rglob("*.rego")
        if not path.name.endswith("_test.rego")
        and any(f'"{name}"' in path.read_text(encoding="utf-8") for name in NAMES)
    }
    assert spelling == {"common/common.rego"}


def test_the_tool_groups_partition_the_six_tools() -> None:
    assert set(ToolName) == READ_TOOLS | MUTATING_TOOLS
    assert not READ_TOOLS & MUTATING_TOOLS
    assert set(ALWAYS_CONFIRMED_TOOLS) | set(SELECTABLE_CONFIRMED_TOOLS) == MUTATING_TOOLS
    assert not set(ALWAYS_CONFIRMED_TOOLS) & set(SELECTABLE_CONFIRMED_TOOLS)
