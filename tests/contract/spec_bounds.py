"""The input bounds SPEC's tables state (§3 encodings, §4 one table per tool), read from SPEC.

tests/contract/test_schema_boundaries.py generates its boundary inputs from these, so a bound
SPEC adds or changes is tested without anyone copying a number. Each bound is keyed by the name
SPEC gives it (`query`, `citation_ids`, `family_refs[]`, `locator.value`, `t`...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SPEC = Path(__file__).resolve().parents[3] / "shared" / "SPEC.md"

Unit = Literal["bytes", "items", "value"]
SAFE_INTEGER_MAX = 2**53 - 1
_RANGE = re.compile(r"(\d[\d,]*)\.\.(\d[\d,]*)")
_NAMES = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Bound:
    """`low..high` (`low` None: only a maximum) in `unit`; `distinct`: items must differ."""

    name: str
    low: int | None
    high: int
    unit: Unit
    distinct: bool = False


@dataclass(frozen=True)
class SpecInputs:
    bounds: dict[str, Bound]
    enums: dict[str, tuple[str, ...]]
    consts: dict[str, int]
    patterns: dict[str, str]
    # tool -> the fields its table marks required (dotted as SPEC writes them)
    required: dict[str, tuple[str, ...]]


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _section(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def _rows(table: str) -> list[list[str]]:
    rows = []
    for line in table.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows[1:]  # the header


def _add(bounds: dict[str, Bound], bound: Bound) -> None:
    known = bounds.setdefault(bound.name, bound)
    assert known == bound, f"SPEC states two bounds for {bound.name}: {known} and {bound}"


def _encodings(text: str, inputs: SpecInputs) -> None:
    for first, rule in _rows(_section(text, "## 3. Encodings", "NFC (project decision")):
        names = [name.removesuffix(" ") for name in _NAMES.findall(first)]
        ranges = _RANGE.findall(rule)
        if ranges and "bytes" in rule:
            if len(ranges) == len(names):
                pairs = list(zip(names, ranges, strict=True))
            else:
                pairs = [(name, ranges[0]) for name in names]
            for name, (low, high) in pairs:
                _add(inputs.bounds, Bound(name, _number(low), _number(high), "bytes"))
        at_most = re.search(r"≤ (\d[\d,]*) bytes", rule)
        if at_most and not ranges:
            for name in names:
                _add(inputs.bounds, Bound(name, None, _number(at_most[1]), "bytes"))
        if first.startswith("Safe integer"):
            inputs.bounds["safe integer"] = Bound(
                "safe integer", -SAFE_INTEGER_MAX, SAFE_INTEGER_MAX, "value"
            )
        pattern = _NAMES.findall(rule)
        if pattern and pattern[0].startswith("^") and names == ["record_id"]:
            inputs.patterns["record_id"] = pattern[0]


def _brace_names(cell: str) -> list[str]:
    inside = re.search(r"\{([^}]*)\}", cell)
    return [] if inside is None else [n.strip().rstrip("?") for n in inside[1].split(",")]


def _tool_table(tool: str, rows: list[list[str]], inputs: SpecInputs) -> None:
    required = []
    for field_cell, kind, req, rule, _default in rows:
        field = _NAMES.findall(field_cell)[0]
        if req == "yes":
            required.append(field)
        leaf = field.rsplit(".", 1)[-1]
        for part in (p.strip() for p in rule.split(";")):
            named = re.match(r"`([\w.\[\]]+)` (.*)", part)
            name, rest = (named[1], named[2]) if named else (leaf, part)
            if "safe integer" in rest:
                for each in [named[1]] if named else _brace_names(kind):
                    inputs.bounds.setdefault(each, inputs.bounds["safe integer"])
                continue
            either = re.fullmatch(r"`([\w-]+)` or `([\w-]+)`", part)
            if either:  # `payload.retention`: the first member of its type is the enum
                inputs.enums[_brace_names(kind)[0]] = (either[1], either[2])
                continue
            for enum_name, members in re.findall(r"`(\w+)` ∈ \{([^}]*)\}", part):
                inputs.enums[enum_name] = tuple(_NAMES.findall(members))
            exactly = re.fullmatch(r"exactly `(\d+)`", rest)
            if exactly:
                inputs.consts[name] = int(exactly[1])
            ranges = _RANGE.findall(rest)
            if not ranges or "∈" in part:
                continue
            low, high = (_number(n) for n in ranges[0])
            if "bytes" in rest:
                unit: Unit = "bytes"
            elif kind == "integer" and not named:
                unit = "value"
            else:
                unit = "items"
            if "refs" in rest and not named:  # `payload.reconciliation`: `{family_refs}`
                name = _brace_names(kind)[0]
            _add(inputs.bounds, Bound(name, low, high, unit, distinct="distinct" in rest))
    inputs.required[tool] = tuple(required)


def read_spec_inputs(spec: Path = SPEC) -> SpecInputs:
    text = spec.read_text(encoding="utf-8")
    inputs = SpecInputs({}, {}, {}, {}, {})
    _encodings(text, inputs)
    tools = _section(text, "## 4. The six tools", "## 5. Error codes")
    for heading in re.finditer(r"^### 4\.\d `(\w+)`$", tools, re.MULTILINE):
        table = tools[heading.end() :].split("\n\n", 2)[1]
        _tool_table(heading[1], _rows(table), inputs)
    return inputs
