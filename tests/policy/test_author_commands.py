"""Issue 22 item 3: author commands that now do what an author expects: `explain` reads
`./policies` for file:line and explains four-eyes approvals, `diff --against shipped`
names the shipped bundle, and bare `build`/`check` in an installed package (no source
checkout) say what to run instead, changing nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engram_memory.policy.authoring import default_bundle
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR
from tests.cli_runner import run_cli
from tests.policy.conftest import POLICIES_DIR

ENV = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "")}
FORGET_BY_KIM = [
    "policy",
    "explain",
    "--tenant",
    "acme",
    "--workspace",
    "records",
    "--principal",
    "user:kim",
    "--group",
    "group:records-clerks",
    "--purpose",
    "purpose:case",
    "--tool",
    "engram_memory_forget",
]


@pytest.fixture
def author_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An author's working directory holding policies/, in an installed package (the
    package finds no source checkout beside it)."""
    shutil.copytree(POLICIES_DIR, tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(default_bundle, "_REPO_ROOT", tmp_path / "site-packages")
    return tmp_path


def test_explain_reads_file_and_line_from_the_policies_of_the_working_directory(
    author_dir: Path,
) -> None:
    explained = run_cli(ENV, *FORGET_BY_KIM, "--approver", "human:kim")
    assert explained.returncode == 0, explained.stderr
    assert "policies/acme.yaml:" in explained.stdout
    assert explained.stdout.count("refused the approver") == 2
    assert "gate_failed" in explained.stdout


def test_explain_shows_an_approval_the_rules_let_through(author_dir: Path) -> None:
    explained = run_cli(
        ENV,
        *FORGET_BY_KIM,
        "--approver",
        "human:olga",
        "--approver-group",
        "group:records-officers",
    )
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.count("lets the approver through") == 2
    assert "gate_failed" not in explained.stdout


def test_bare_build_and_check_in_an_installed_package_suggest_what_to_run(
    author_dir: Path,
) -> None:
    shipped = {p.name: p.read_bytes() for p in DEFAULT_BUNDLE_DIR.iterdir() if p.is_file()}
    built = run_cli(ENV, "policy", "build")
    assert built.returncode == 2
    assert "--out" in built.stderr
    checked = run_cli(ENV, "policy", "check")
    assert checked.returncode == 2
    assert "policy verify" in checked.stderr
    after = {p.name: p.read_bytes() for p in DEFAULT_BUNDLE_DIR.iterdir() if p.is_file()}
    assert after == shipped


@pytest.mark.parametrize(
    "argv", [["shipped"], ["--against", "shipped", "a", "b"], []], ids=["one", "three", "none"]
)
def test_diff_refuses_sides_named_neither_way(argv: list[str]) -> None:
    assert run_cli(ENV, "policy", "diff", *argv).returncode == 2


def test_diff_against_shipped_compares_the_package_bundle_with_the_tree(
    opa_bin: Path,
) -> None:
    env = {**ENV, "ENGRAM_OPA_BIN": str(opa_bin)}
    root = POLICIES_DIR.parent
    same = run_cli(env, "policy", "diff", "--against", "shipped", str(root))
    assert same.returncode == 0, same.stderr
    assert "Behaviour changed: no" in same.stdout
