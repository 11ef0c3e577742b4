"""Tenant test tables: `policies/tests/*.yaml`, "binding + tool call -> expected decisions".

```yaml
binding:                       # optional: defaults every case's binding fields
  tenant: acme
  workspace: support
cases:
  - name: bob may not forget
    binding: {principal: "user:bob", purpose: "purpose:support-case"}
    call: {tool: engram_memory_forget}
    expect:
      authz: {allow: false, reasons: [tool_not_granted]}
```

`expect` names domains the call touches (`plan_call`); per domain the keys of
`calls.EXPECTABLE`, `reasons` (each must be among the actual reasons) or `exact_reasons`
(the actual reasons, in any order). A case is checked against what the real OPA answers.

A case may give sample content, `text:` (the primary component's text of a capture or an
admission), and `expect_classifiers: [names]`, exactly the workspace's content classifiers
that match it; the names that match also go into the case's decisions, as the service
sends them. Either `expect` or `expect_classifiers` (or both) must be there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_memory._internal.yaml_source import YamlSource, read_yaml
from engram_memory.contract.exceptions import CallError, PolicyDataError
from engram_memory.policy.authoring.calls import (
    EXPECTABLE,
    Binding,
    PolicyQuery,
    ToolCall,
    classifier_facts,
    parse_binding,
    parse_call,
    plan_call,
    summarize,
    workspace_classifiers,
)

_CASE_KEYS = frozenset({"name", "binding", "call", "expect", "text", "expect_classifiers"})


@dataclass(frozen=True)
class TestCase:
    """One row of a table: where it is, what it asks, what it expects per domain."""

    __test__ = False  # not a pytest class, whatever its name

    name: str
    location: str
    binding: Binding
    call: ToolCall
    queries: list[PolicyQuery]
    expect: dict[str, dict[str, Any]] = field(default_factory=dict)
    # `expect_classifiers` (None: not stated) and the names that matched `text`.
    expect_classifiers: list[str] | None = None
    found_classifiers: list[str] = field(default_factory=list)


def table_files(tests_dir: Path) -> list[Path]:
    """The YAML tables of `tests_dir` (`*.yaml`, `*.yml`), in a stable order."""
    if not tests_dir.is_dir():
        return []
    return sorted(p for p in tests_dir.iterdir() if p.is_file() and p.suffix in {".yaml", ".yml"})


def _check_expect(raw: object, queries: list[PolicyQuery], where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, Mapping) or not raw:
        raise CallError([f"{where}expect: name at least one domain"])
    touched = {q.domain for q in queries}
    problems: list[str] = []
    expect: dict[str, dict[str, Any]] = {}
    for domain, wanted in raw.items():
        if domain not in touched:
            problems.append(f"{where}expect.{domain}: the call does not ask this domain")
            continue
        if not isinstance(wanted, Mapping) or not wanted:
            problems.append(f"{where}expect.{domain}: name at least one expected field")
            continue
        allowed = EXPECTABLE[domain] | {"reasons", "exact_reasons"}
        for key, value in wanted.items():
            if key not in allowed:
                problems.append(
                    f"{where}expect.{domain}.{key}: unknown (one of {', '.join(sorted(allowed))})"
                )
            elif key in {"reasons", "exact_reasons"} and not (
                isinstance(value, list) and all(isinstance(v, str) for v in value)
            ):
                problems.append(f"{where}expect.{domain}.{key}: a list of reason strings")
        expect[str(domain)] = dict(wanted)
    if problems:
        raise CallError(problems)
    return expect


def _classifier_keys(raw: Mapping[str, Any], where: str) -> tuple[str | None, list[str] | None]:
    text, expected = raw.get("text"), raw.get("expect_classifiers")
    problems = []
    if text is not None and not isinstance(text, str):
        problems.append(f"{where}text: a string (sample content)")
    if expected is not None and not (
        isinstance(expected, list) and all(isinstance(name, str) for name in expected)
    ):
        problems.append(f"{where}expect_classifiers: a list of classifier names")
    if expected is not None and text is None:
        problems.append(f"{where}expect_classifiers: give the sample `text` they run on")
    if problems:
        raise CallError(problems)
    return text, None if expected is None else sorted(set(expected))


def _case(
    raw: object,
    defaults: Mapping[str, Any],
    source: YamlSource,
    position: int,
    compiled: Mapping[str, Any] | None,
) -> TestCase:
    where = f"cases[{position}]."
    if not isinstance(raw, Mapping):
        raise CallError([f"{where[:-1]}: a case is a mapping"])
    unknown = sorted(set(raw) - _CASE_KEYS)
    if unknown:
        raise CallError([f"{where}{key}: unknown key" for key in unknown])
    binding = parse_binding({**defaults, **_mapping(raw.get("binding"))}, f"{where}binding.")
    call = parse_call(raw.get("call"), f"{where}call.")
    text, expected = _classifier_keys(raw, where)
    if text is not None:
        call = call.model_copy(update={"text": text})
    definitions = workspace_classifiers(compiled, binding)
    try:
        queries = plan_call(binding, call, definitions)
        facts = classifier_facts(call, definitions) or {}
    except CallError as exc:
        raise CallError([f"{where}{problem}" for problem in exc.problems]) from None
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise CallError([f"{where}name: required (a string)"])
    location = f"{source.name}:{source.line_of(('cases', position))}"
    expect = (
        {}
        if expected is not None and raw.get("expect") is None
        else _check_expect(raw.get("expect"), queries, where)
    )
    found = sorted({name for names in facts.values() for name in names})
    return TestCase(name, location, binding, call, queries, expect, expected, found)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def load_cases(tests_dir: Path, compiled: Mapping[str, Any] | None = None) -> list[TestCase]:
    """Every case of every table in `tests_dir`; `compiled` (the data document) gives each
    workspace's content classifiers.

    Raises:
        PolicyDataError: a table is malformed (every problem, as `file:line: path: problem`).
    """
    cases: list[TestCase] = []
    problems: list[str] = []
    for path in table_files(tests_dir):
        source = YamlSource(str(path))
        doc = read_yaml(path, source)
        if doc is None:
            pass
        elif not isinstance(doc, Mapping) or not isinstance(doc.get("cases"), list):
            source.report(("cases",), "a table is a mapping with a `cases` list")
        elif set(doc) - {"binding", "cases"}:
            for key in sorted(set(doc) - {"binding", "cases"}):
                source.report((key,), "unknown key (binding, cases)")
        elif not isinstance(doc.get("binding", {}), Mapping):
            source.report(("binding",), "the table's binding is a mapping of binding fields")
        else:
            defaults = _mapping(doc.get("binding"))
            for position, raw in enumerate(doc["cases"]):
                try:
                    cases.append(_case(raw, defaults, source, position, compiled))
                except CallError as exc:
                    for problem in exc.problems:
                        source.problems.append(
                            f"{source.name}:{source.line_of(_loc(problem))}: {problem}"
                        )
        problems += source.problems
    if problems:
        raise PolicyDataError(problems)
    return cases


def _loc(problem: str) -> tuple[str | int, ...]:
    """The YAML path a `cases[3].call.tool: ...` problem line names."""
    dotted = problem.split(":", 1)[0]
    loc: list[str | int] = []
    for part in dotted.replace("[", ".[").split("."):
        if part.startswith("[") and part.endswith("]") and part[1:-1].isdigit():
            loc.append(int(part[1:-1]))
        elif part:
            loc.append(part)
    return tuple(loc)


def mismatches(case: TestCase, results: list[object]) -> list[str]:
    """`domain.field: expected X, got Y` for every unmet expectation (`results[i]` answers
    `case.queries[i]`)."""
    actual = {
        q.domain: summarize(q.domain, case.call.tool, result)
        for q, result in zip(case.queries, results, strict=True)
    }
    lines: list[str] = []
    if case.expect_classifiers is not None and case.expect_classifiers != case.found_classifiers:
        lines.append(
            f"classifiers: expected {json.dumps(case.expect_classifiers)}, "
            f"got {json.dumps(case.found_classifiers)}"
        )
    for domain, wanted in case.expect.items():
        got = actual[domain]
        if "error" in got:
            lines.append(f"{domain}: {got['error']}")
            continue
        for key, value in wanted.items():
            if key == "reasons":
                missing = sorted(set(value) - set(got["reasons"]))
                if missing:
                    lines.append(
                        f"{domain}.reasons: expected to include {json.dumps(missing)}, "
                        f"got {json.dumps(got['reasons'])}"
                    )
            elif key == "exact_reasons":
                if sorted(value) != sorted(got["reasons"]):
                    lines.append(
                        f"{domain}.reasons: expected exactly {json.dumps(sorted(value))}, "
                        f"got {json.dumps(got['reasons'])}"
                    )
            elif got.get(key) != value or type(got.get(key)) is not type(value):
                expected, actual_value = json.dumps(value), json.dumps(got.get(key))
                lines.append(f"{domain}.{key}: expected {expected}, got {actual_value}")
    return lines
