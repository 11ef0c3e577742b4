"""Issue 22 item 3: the three mistakes that used to pass `policy validate --strict` (a typo in
a group name, a catch-all redaction rule placed first, a never-store pattern that matches
every capture), and `policy try-pattern`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engram_memory.contract.secrets import SecretDetector
from engram_memory.policy.authoring.lint import lint_policies
from engram_memory.policy.authoring.ordinary_text import ordinary_corpus
from tests.cli_runner import run_cli
from tests.policy.test_lint import CLEAN, _line_of, _warnings

ENV = {"PATH": os.environ.get("PATH", "")}
GROUPED = CLEAN.replace(
    "workspaces:\n", 'groups: ["group:advisers", "group:compliance"]\nworkspaces:\n'
).replace(
    '      - principal: "user:ann"\n',
    '      - group: "group:advisers"\n'
    "        roles: [adviser]\n"
    '        purposes: ["purpose:advice"]\n'
    '      - principal: "user:ann"\n',
)


def test_declared_groups_used_as_declared_raise_no_warning(tmp_path: Path) -> None:
    assert _warnings(tmp_path, GROUPED) == []


def test_a_misspelt_group_is_reported_with_the_declared_name_it_resembles(
    tmp_path: Path,
) -> None:
    text = GROUPED.replace('group: "group:advisers"', 'group: "group:advisors"')
    (warning,) = lint_policies(_write(tmp_path, text))
    assert (warning.warning_id, warning.line) == (
        "undeclared-group",
        _line_of(text, "group:advisors"),
    )
    assert "group:advisers" in warning.message


def test_a_group_in_a_tenant_that_declares_none_is_reported(tmp_path: Path) -> None:
    text = GROUPED.replace('groups: ["group:advisers", "group:compliance"]\n', "")
    assert _warnings(tmp_path, text) == [("undeclared-group", _line_of(text, "group:advisers"))]


def test_an_approval_rule_naming_an_undeclared_group_is_reported(tmp_path: Path) -> None:
    approval = (
        "    confirmation:\n"
        "      approval:\n"
        "        - {name: officers, tools: [engram_memory_forget], groups: ['group:complience']}\n"
    )
    text = GROUPED + approval
    assert _warnings(tmp_path, text) == [("undeclared-group", _line_of(text, "complience"))]


CATCH_ALL = "      - name: everyone\n        allowed_fields: [/record_digest]\n"


def test_a_catch_all_redaction_rule_placed_first_shadows_every_later_rule(
    tmp_path: Path,
) -> None:
    text = CLEAN.replace("    redaction:\n", "    redaction:\n" + CATCH_ALL)
    assert _warnings(tmp_path, text) == [
        ("shadowed-redaction-rule", _line_of(text, "- name: advisers"))
    ]


def test_a_catch_all_placed_last_shadows_nothing(tmp_path: Path) -> None:
    text = CLEAN.replace("    reconciliation:\n", CATCH_ALL + "    reconciliation:\n")
    assert _warnings(tmp_path, text) == []


def test_a_rule_for_a_purpose_the_earlier_rule_does_not_cover_is_not_shadowed(
    tmp_path: Path,
) -> None:
    earlier = (
        "      - name: advice-only\n"
        '        purposes: ["purpose:other"]\n'
        "        allowed_fields: [/record_digest]\n"
    )
    text = CLEAN.replace("    redaction:\n", "    redaction:\n" + earlier)
    assert _warnings(tmp_path, text) == []


def _with_pattern(regex: str) -> str:
    return CLEAN.replace(
        "workspaces:\n",
        f"never_store:\n  patterns:\n    - {{name: staff-code, regex: '{regex}'}}\nworkspaces:\n",
    )


@pytest.mark.parametrize("regex", [".*", "[a-z]+", "\\d{2}", "(?i)the"])
def test_a_never_store_pattern_that_matches_ordinary_text_is_reported(
    tmp_path: Path, regex: str
) -> None:
    text = _with_pattern(regex)
    assert _warnings(tmp_path, text) == [
        ("pattern-matches-ordinary-text", _line_of(text, "staff-code"))
    ]


def test_a_pattern_anchored_on_the_secret_matches_no_ordinary_text(tmp_path: Path) -> None:
    assert _warnings(tmp_path, _with_pattern("\\bBANK-STAFF-[0-9]{8}\\b")) == []


def test_the_ordinary_corpus_is_reproducible_and_holds_no_built_in_secret() -> None:
    corpus = ordinary_corpus()
    assert len(corpus) == 400
    assert len(set(corpus)) > 350
    assert corpus == ordinary_corpus.__wrapped__()
    assert not SecretDetector().any_secret(corpus)


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "bank.yaml").write_text(text, encoding="utf-8")
    return tmp_path


def test_try_pattern_shows_each_match_and_exits_0_only_on_a_match(tmp_path: Path) -> None:
    policies = _write(tmp_path, _with_pattern("\\bBANK-STAFF-[0-9]{8}\\b"))
    common = ["policy", "try-pattern", "--policies", str(policies), "staff-code"]
    hit = run_cli(ENV, *common, "badge BANK-STAFF-12345678 at the desk")
    assert hit.returncode == 0
    assert "[6:25] 'BANK-STAFF-12345678'" in hit.stdout
    assert "matches 0 of 400" in hit.stdout
    assert run_cli(ENV, *common, "badge BANK-STAFF-1234 at the desk").returncode == 1
    unknown = run_cli(ENV, "policy", "try-pattern", "--policies", str(policies), "nope", "x")
    assert unknown.returncode == 2
