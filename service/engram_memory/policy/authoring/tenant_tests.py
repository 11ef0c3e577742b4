"""`policy test`: the shipped Rego tests and the author's tenant tests, against the data
compiled from the tenants being built.

`opa test rego/` alone sees no tenant data, and `opa test -b bundle.tar.gz tests/` refuses
the tests ("overlapping roots"). So everything is staged in a temporary directory the way
the bundle lays it out: the Rego modules (tests included) under `rego/`, the compiled
`data.json` at the top (so OPA loads it as `data.engram.config`, as from the bundle), and the
author's `policies/tests/**/*.rego` under `tenant_tests/`. The pinned `opa test` runs on it;
the YAML case tables (`policy/case_tables.py`) are evaluated by one `opa eval` over the same
tree, each case's inputs built by `calls.plan_call` exactly as the service builds them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_memory.contract.canonical import canonical_json
from engram_memory.contract.exceptions import PolicyTestError
from engram_memory.policy.authoring.calls import DOMAIN_OF_PATH
from engram_memory.policy.authoring.case_tables import TestCase, load_cases, mismatches
from engram_memory.policy.authoring.data_compiler import compile_policies
from engram_memory.policy.opa_binary import require_opa_binary

Progress = Callable[[str], None]
_QUERIES_KEY = "engram_policy_test_queries"
_RUNNER_PACKAGE = "engram_policy_test_runner"


@dataclass(frozen=True)
class TestResult:
    """One test: `rego` (an `opa test` rule) or `table` (a YAML case)."""

    __test__ = False  # not a pytest class, whatever its name

    kind: str
    name: str
    location: str
    passed: bool
    details: tuple[str, ...] = ()


@dataclass
class TestReport:
    __test__ = False  # not a pytest class, whatever its name

    results: list[TestResult] = field(default_factory=list)
    # Source module -> percent of its lines covered by the Rego tests (`--coverage` only).
    coverage: dict[str, float] | None = None
    total_coverage: float | None = None

    @property
    def failed(self) -> list[TestResult]:
        return [result for result in self.results if not result.passed]

    def as_json(self) -> dict[str, Any]:
        return {
            "passed": sum(1 for r in self.results if r.passed),
            "failed": len(self.failed),
            "tests": [
                {
                    "kind": r.kind,
                    "name": r.name,
                    "location": r.location,
                    "passed": r.passed,
                    "details": list(r.details),
                }
                for r in self.results
            ],
            "coverage": None
            if self.coverage is None
            else {"total": self.total_coverage, "modules": self.coverage},
        }


def _opa(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(  # noqa: S603 - fixed argv, binary chosen by the operator
            argv, capture_output=True, text=True, timeout=600, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise PolicyTestError(f"{what}: cannot run {argv[0]}") from exc


def _json_output(
    completed: subprocess.CompletedProcess[str], what: str, shown: Mapping[str, str]
) -> Any:
    try:
        return json.loads(completed.stdout)
    except ValueError:
        raise _refused(completed, what, shown) from None


def _refused(
    completed: subprocess.CompletedProcess[str], what: str, shown: Mapping[str, str]
) -> PolicyTestError:
    output = (completed.stdout + completed.stderr).strip()
    # OPA names the staged copies; the author needs the files they edit.
    for staged, source in sorted(shown.items(), key=lambda item: -len(item[0])):
        output = output.replace(staged, source)
    return PolicyTestError(f"{what} failed:\n{output}")


def _stage(
    rego_dir: Path, tests_dir: Path, compiled: Mapping[str, Any], stage: Path
) -> dict[str, str]:
    """Lay out the test tree; return staged path -> the source path to show."""
    shown: dict[str, str] = {}
    for root, prefix in ((rego_dir, "rego"), (tests_dir, "tenant_tests")):
        for path in sorted(root.rglob("*.rego")) if root.is_dir() else []:
            target = stage / prefix / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            shown[str(target)] = str(path)
    (stage / "data.json").write_bytes(canonical_json(compiled))
    return shown


def _rego_results(raw: object, shown: Mapping[str, str]) -> list[TestResult]:
    if not isinstance(raw, list):
        raise PolicyTestError("opa test: unexpected output")
    results = []
    for item in raw:
        where = item.get("location", {})
        location = f"{shown.get(where.get('file', ''), where.get('file', '?'))}:{where.get('row')}"
        details = [str(item["error"]["message"])] if isinstance(item.get("error"), dict) else []
        if item.get("skip"):
            continue
        passed = not item.get("fail") and not item.get("error")
        name = f"{str(item.get('package', '')).removeprefix('data.')}.{item.get('name')}"
        results.append(TestResult("rego", name, location, passed, tuple(details)))
    return sorted(results, key=_file_then_line)


def _file_then_line(result: TestResult) -> tuple[str, int]:
    file, _, line = result.location.rpartition(":")
    return file, int(line) if line.isdigit() else 0


def _runner_module() -> str:
    rules = [f"package {_RUNNER_PACKAGE}\n"]
    for path in DOMAIN_OF_PATH:
        rules.append(
            "answers[i] := answer if {\n"
            f"\tsome i, query in data.{_QUERIES_KEY}\n"
            f'\tquery.path == "{path}"\n'
            f"\tanswer := data.{path.replace('/', '.')} with input as query.input\n"
            "}\n"
        )
    return "\n".join(rules)


def _table_results(cases: list[TestCase], opa: Path, stage: Path, work: Path) -> list[TestResult]:
    queries = [q for case in cases for q in case.queries]
    if not queries:
        return []
    (work / "runner.rego").write_text(_runner_module(), "utf-8")
    payload = [{"path": q.path, "input": q.input} for q in queries]
    (work / "queries.json").write_text(json.dumps({_QUERIES_KEY: payload}), "utf-8")
    # The bundle's modules and data only: a tenant's test module must not change a decision.
    argv = [str(opa), "eval", "--format", "json", "--ignore", "*_test.rego"]
    argv += ["-d", str(stage / "rego"), "-d", str(stage / "data.json")]
    argv += ["-d", str(work / "runner.rego"), "-d", str(work / "queries.json")]
    completed = _opa([*argv, f"data.{_RUNNER_PACKAGE}.answers"], "opa eval (tenant test tables)")
    output = _json_output(completed, "opa eval (tenant test tables)", {})
    try:
        answers = output["result"][0]["expressions"][0]["value"]
    except (KeyError, IndexError, TypeError):
        raise PolicyTestError("opa eval (tenant test tables): no answers") from None
    results, offset = [], 0
    for case in cases:
        got = [answers.get(str(offset + i)) for i in range(len(case.queries))]
        offset += len(case.queries)
        problems = mismatches(case, got)
        results.append(TestResult("table", case.name, case.location, not problems, tuple(problems)))
    return results


def _coverage(raw: object, shown: Mapping[str, str]) -> tuple[dict[str, float], float]:
    if not isinstance(raw, dict) or not isinstance(raw.get("files"), dict):
        raise PolicyTestError("opa test --coverage: unexpected output")
    modules = {
        shown.get(path, path): float(report.get("coverage", 0.0))
        for path, report in sorted(raw["files"].items())
        if not path.endswith("_test.rego")
    }
    return modules, float(raw.get("coverage", 0.0))


def run_policy_tests(
    rego_dir: Path | str,
    policies_dir: Path | str,
    tests_dir: Path | str | None = None,
    *,
    opa_bin: Path | str | None = None,
    coverage: bool = False,
    progress: Progress | None = None,
) -> TestReport:
    """Run the Rego tests of `rego_dir` and `tests_dir` (default `<policies_dir>/tests`)
    and its YAML tables against the data compiled from `policies_dir`.

    Raises:
        PolicyDataError: the policy data or a test table is invalid.
        OpaBinaryNotFound: no OPA binary.
        PolicyTestError: OPA refused the modules (a compile error) or its output.
    """

    def say(message: str) -> None:
        if progress is not None:
            progress(message)

    rego, policies = Path(rego_dir), Path(policies_dir)
    tests = Path(tests_dir) if tests_dir is not None else policies / "tests"
    if not rego.is_dir():
        raise PolicyTestError(f"{rego}: not a directory")
    if tests_dir is not None and not tests.is_dir():
        raise PolicyTestError(f"{tests}: not a directory")
    opa = require_opa_binary(opa_bin)
    compiled = compile_policies(policies)
    cases = load_cases(tests, compiled)
    report = TestReport()
    with tempfile.TemporaryDirectory(prefix="engram-policy-test-") as tmp:
        stage = Path(tmp) / "stage"
        shown = _stage(rego, tests, compiled, stage)
        # The bar the shipped tests meet (`policy build` checks rego/ the same way).
        say(f"checking the Rego of {rego} and {tests} (opa check --strict)")
        checked = _opa([str(opa), "check", "--strict", str(stage)], "opa check --strict")
        if checked.returncode != 0:
            raise _refused(checked, "opa check --strict", shown)
        say(f"running Rego tests of {rego} and {tests} against the data of {policies}")
        completed = _opa([str(opa), "test", "--format", "json", str(stage)], "opa test")
        report.results += _rego_results(_json_output(completed, "opa test", shown), shown)
        say(f"evaluating {len(cases)} tenant test case(s) from {tests}/*.yaml")
        report.results += _table_results(cases, opa, stage, Path(tmp))
        if coverage:
            say("measuring coverage (opa test --coverage)")
            argv = [str(opa), "test", "--coverage", "--format", "json", str(stage)]
            completed = _opa(argv, "opa test --coverage")
            raw = _json_output(completed, "opa test --coverage", shown)
            report.coverage, report.total_coverage = _coverage(raw, shown)
    return report


def describe_report(report: TestReport) -> list[str]:
    """The human report: one line per test (details indented), coverage, totals."""
    lines = []
    for result in report.results:
        status = "ok  " if result.passed else "FAIL"
        lines.append(f"{status} {result.location}: {result.name}")
        lines += [f"       {detail}" for detail in result.details]
    if report.coverage is not None:
        lines.append(f"coverage {report.total_coverage:.2f}% of Rego lines by the Rego tests:")
        lines += [f"  {pct:6.2f}%  {module}" for module, pct in report.coverage.items()]
    passed = len(report.results) - len(report.failed)
    lines.append(f"{passed} passed, {len(report.failed)} failed")
    return lines
