"""The Rego sources pass the pinned OPA's own gates: fmt, check --strict, tests at 100%."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.policy.conftest import REGO_DIR

pytestmark = pytest.mark.opa


def _opa(opa_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(opa_bin), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_rego_is_formatted_with_opa_fmt(opa_bin: Path) -> None:
    completed = _opa(opa_bin, "fmt", "--list", "--fail", str(REGO_DIR))
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_rego_passes_opa_check_strict(opa_bin: Path) -> None:
    completed = _opa(opa_bin, "check", "--strict", str(REGO_DIR))
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_rego_unit_tests_pass_with_full_coverage(opa_bin: Path) -> None:
    completed = _opa(opa_bin, "test", "--coverage", "--format=json", str(REGO_DIR))
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    uncovered = {
        name: entry.get("not_covered")
        for name, entry in report["files"].items()
        if entry.get("not_covered")
    }
    assert uncovered == {}
    assert report["coverage"] == 100


def test_every_domain_has_a_module_and_a_test_beside_it() -> None:
    for domain in (
        "discovery",
        "authz",
        "confirmation",
        "retention",
        "reconciliation",
        "admission",
    ):
        assert (REGO_DIR / "engram" / domain / f"{domain}.rego").is_file()
        assert (REGO_DIR / "engram" / domain / f"{domain}_test.rego").is_file()
