"""tests/RULES.md cannot rot: every node id it lists is collected by pytest, every rule row
names at least one, and every test in tests/rules/ is listed there."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "tests" / "RULES.md"
RULES_DIR = REPO / "tests" / "rules"
NODE_ID = re.compile(r"`(tests/[^`\s]+?\.py::[^`\s]+)`")
SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")


@dataclass(frozen=True)
class Row:
    line: int
    rule: str
    node_ids: tuple[str, ...]


def table_rows(text: str) -> list[Row]:
    """Body rows of every Markdown table (the row above a `|---|` line is its header)."""
    lines = text.splitlines()
    rows: list[Row] = []
    for number, line in enumerate(lines):
        if not line.startswith("|") or SEPARATOR.match(line):
            continue
        if number + 1 < len(lines) and SEPARATOR.match(lines[number + 1]):
            continue  # a header row
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows.append(Row(number + 1, cells[0], tuple(NODE_ID.findall(line))))
    return rows


@cache
def rows() -> tuple[Row, ...]:
    return tuple(table_rows(RULES.read_text("utf-8")))


@cache
def collected() -> frozenset[str]:
    """Node ids pytest collects from every file RULES.md names, and from tests/rules/."""
    files = sorted({node.split("::")[0] for row in rows() for node in row.node_ids})
    missing = [f for f in files if not (REPO / f).is_file()]
    assert missing == [], f"RULES.md names files that do not exist: {missing}"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"),
            *files,
            str(RULES_DIR.relative_to(REPO)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return frozenset(line.strip() for line in result.stdout.splitlines() if "::" in line)


def _base(node_id: str) -> str:
    return node_id.split("[", 1)[0]


def test_rules_md_has_the_rule_groups_of_issue_3() -> None:
    headings = re.findall(r"^## (.+)$", RULES.read_text("utf-8"), re.MULTILINE)
    for number in range(1, 10):
        assert any(h.startswith(f"{number}. ") for h in headings), number
    assert any(h.startswith("Host-only maintenance") for h in headings)
    assert any(h.startswith("Reference host") for h in headings)
    assert len(rows()) >= 60


def test_every_rule_row_names_a_rule_and_at_least_one_node_id() -> None:
    empty = [row.line for row in rows() if not row.rule or not row.node_ids]
    assert empty == [], f"RULES.md rows without a rule or a node id, at lines {empty}"


def test_every_node_id_in_rules_md_is_collected_by_pytest() -> None:
    known = collected()
    bases = {_base(node) for node in known}
    unknown = sorted(
        {
            node
            for row in rows()
            for node in row.node_ids
            if node not in known and ("[" in node or node not in bases)
        }
    )
    assert unknown == [], f"RULES.md names tests pytest does not collect: {unknown}"


def test_every_rule_test_is_listed_in_rules_md() -> None:
    listed = {_base(node) for row in rows() for node in row.node_ids}
    ours = {
        _base(node)
        for node in collected()
        if node.startswith("tests/rules/") and not node.startswith("tests/rules/test_traceab")
    }
    assert ours, "no tests collected from tests/rules"
    assert sorted(ours - listed) == [], "tests in tests/rules/ missing from RULES.md"


def test_the_parser_sees_rows_and_ids_and_rejects_empty_rows() -> None:
    sample = (
        "| Rule | Proven by |\n|---|---|\n"
        "| A | `tests/a.py::test_x`<br>`tests/b.py::test_y[p]` |\n| B | none |\n"
    )
    parsed = table_rows(sample)
    assert [(r.rule, r.node_ids) for r in parsed] == [
        ("A", ("tests/a.py::test_x", "tests/b.py::test_y[p]")),
        ("B", ()),
    ]
