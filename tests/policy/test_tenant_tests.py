"""`engram-memory policy test`: shipped Rego tests and tenant tests against the compiled data,
run by the pinned OPA; `policy build` runs them too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engram_memory.cli.main import main
from engram_memory.contract.exceptions import BundleError
from engram_memory.policy.authoring.build import build_bundle
from tests.policy.conftest import POLICIES_DIR, REGO_DIR

FAILING_CASE = """\
binding: {tenant: acme, workspace: support, purpose: "purpose:support-case"}
cases:
  - name: bob reads
    binding: {principal: "user:bob"}
    call: {tool: engram_memory_get}
    expect:
      authz: {allow: true}
  - name: bob may forget (wrong on purpose)
    binding: {principal: "user:bob"}
    call: {tool: engram_memory_forget}
    expect:
      authz: {allow: true}
"""

FAILING_REGO = """\
package tenant_tests.wrong_test

import data.engram.authz

test_bob_may_forget if {
\tauthz.decision.allow with input as {
\t\t"tenant": "acme", "workspace": "support", "principal": "user:bob",
\t\t"purpose_ref": "purpose:support-case", "tool": "engram_memory_forget",
\t}
}
"""

# Passes only if the compiled YAML is loaded where the bundle puts it.
DATA_PRESENT_REGO = """\
package tenant_tests.data_test

test_the_compiled_tenants_are_loaded if {
\tdata.engram.config.tenants.acme.workspaces.support.memory_enabled == true
}
"""


def _policy_test(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["policy", "test", "--rego", str(REGO_DIR), "--json", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    """A copy of the shipped tenants with an empty tests directory."""
    target = tmp_path / "policies"
    target.mkdir()
    for path in POLICIES_DIR.glob("*.yaml"):
        shutil.copyfile(path, target / path.name)
    (target / "tests").mkdir()
    return target


def test_the_shipped_tenant_tests_pass_against_the_compiled_data(
    opa_bin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _policy_test(capsys, "--policies", str(POLICIES_DIR))
    assert code == 0
    kinds = {(t["kind"], Path(t["location"].rsplit(":", 1)[0]).name) for t in report["tests"]}
    assert ("table", "acme.yaml") in kinds
    assert ("rego", "globex_test.rego") in kinds
    assert ("rego", "authz_test.rego") in kinds
    assert report["failed"] == 0


def test_a_tenant_rego_test_sees_the_data_compiled_from_the_yaml(
    opa_bin: Path, policies: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (policies / "tests" / "data_test.rego").write_text(DATA_PRESENT_REGO)
    code, report = _policy_test(capsys, "--policies", str(policies))
    assert code == 0
    names = {t["name"]: t["passed"] for t in report["tests"]}
    assert names["tenant_tests.data_test.test_the_compiled_tenants_are_loaded"] is True


def test_a_failing_table_case_fails_with_exit_1_and_names_the_case_by_file_and_line(
    opa_bin: Path, policies: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (policies / "tests" / "bank.yaml").write_text(FAILING_CASE)
    code, report = _policy_test(capsys, "--policies", str(policies))
    assert code == 1
    failed = [t for t in report["tests"] if not t["passed"]]
    assert [(t["name"], t["location"]) for t in failed] == [
        ("bob may forget (wrong on purpose)", f"{policies / 'tests' / 'bank.yaml'}:8")
    ]
    assert failed[0]["details"]  # expected vs actual


def test_a_failing_tenant_rego_test_fails_with_exit_1(
    opa_bin: Path, policies: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (policies / "tests" / "wrong_test.rego").write_text(FAILING_REGO)
    code, report = _policy_test(capsys, "--policies", str(policies))
    assert code == 1
    failed = [t["name"] for t in report["tests"] if not t["passed"]]
    assert failed == ["tenant_tests.wrong_test.test_bob_may_forget"]


def test_coverage_is_reported_per_rego_module(
    opa_bin: Path, policies: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _policy_test(capsys, "--policies", str(policies), "--coverage")
    assert code == 0
    modules = report["coverage"]["modules"]
    assert modules[str(REGO_DIR / "engram" / "authz" / "authz.rego")] == 100.0
    assert not any(name.endswith("_test.rego") for name in modules)


def _table(call: str, expect: str, who: str = "principal: u, purpose: p") -> str:
    return (
        f"cases:\n  - name: x\n    binding: {{tenant: acme, workspace: support, {who}}}\n"
        f"    call: {call}\n    expect: {expect}\n"
    )


@pytest.mark.parametrize(
    "table",
    [
        _table("{tool: engram_memory_get}", "{authz: {allow: true}}", who="purpose: p"),
        _table("{tool: engram_memory_delete}", "{authz: {allow: true}}"),
        _table("{tool: engram_memory_get}", "{admission: {outcome: x}}"),
        _table("{tool: engram_memory_get}", "{authz: {alow: true}}"),
        _table("{tool: engram_memory_get, now: yesterday}", "{authz: {allow: true}}"),
        "cases: {}\n",
        "cases: [\n",
    ],
    ids=[
        "no-principal", "unknown-tool", "domain-not-asked", "unknown-field", "bad-instant",
        "not-a-list", "not-yaml",
    ],
)  # fmt: skip
def test_a_malformed_table_exits_2(
    opa_bin: Path, policies: Path, capsys: pytest.CaptureFixture[str], table: str
) -> None:
    (policies / "tests" / "bad.yaml").write_text(table)
    assert main(["policy", "test", "--rego", str(REGO_DIR), "--policies", str(policies)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_policy_build_refuses_to_build_when_a_tenant_test_fails(
    opa_bin: Path, policies: Path, tmp_path: Path
) -> None:
    (policies / "tests" / "bank.yaml").write_text(FAILING_CASE)
    out = tmp_path / "bundle"
    with pytest.raises(BundleError):
        build_bundle(REGO_DIR, policies, out, label="t", opa_bin=opa_bin)
    assert not (out / "bundle.tar.gz").exists()


def test_a_tenant_rego_test_that_fails_the_strict_check_exits_2(
    opa_bin: Path, policies: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sloppy = "package tenant_tests.sloppy_test\n\ntest_x if {\n\tx := 1\n\ttrue\n}\n"
    (policies / "tests" / "sloppy_test.rego").write_text(sloppy)
    assert main(["policy", "test", "--rego", str(REGO_DIR), "--policies", str(policies)]) == 2
    assert str(policies / "tests" / "sloppy_test.rego") in capsys.readouterr().err
