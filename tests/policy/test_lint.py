"""`policy validate [--strict]`: warnings about valid data that probably misleads its author,
and errors reported at the line of the value that is actually used."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engram_memory.cli.main import main
from engram_memory.policy.authoring.lint import lint_policies
from tests.policy.conftest import POLICIES_DIR

# A workspace that raises no warning; each test changes one thing.
CLEAN = """\
schema_version: 1
tenant: bank
memory_enabled: true
workspaces:
  advice:
    memory_enabled: true
    roles:
      adviser: [engram_memory_search, engram_memory_get, engram_memory_request_admission]
    grants:
      - principal: "user:ann"
        roles: [adviser]
        purposes: ["purpose:advice"]
    redaction:
      - name: advisers
        roles: [adviser]
        purposes: ["purpose:advice"]
        allowed_fields: [/components]
    reconciliation:
      consented_families: ["family:advice-notes"]
    admission:
      policy_id: bank-advice
      policy_version: "1"
      reject:
        evidence_ref_prefixes: ["evidence:untrusted/"]
      adjudicate:
        source_ref_prefixes: ["source:external/"]
      accept:
        evidence_ref_prefixes: ["evidence:ticket/"]
    maintenance:
      operators:
        "human:olga": [read, maintain]
"""


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "bank.yaml").write_text(text, encoding="utf-8")
    return tmp_path


def _line_of(text: str, needle: str, occurrence: int = 1) -> int:
    lines = [number for number, line in enumerate(text.splitlines(), 1) if needle in line]
    return lines[occurrence - 1]


def _warnings(tmp_path: Path, text: str) -> list[tuple[str, int]]:
    return [(w.warning_id, w.line) for w in lint_policies(_write(tmp_path, text))]


def test_the_clean_sample_and_the_shipped_tenants_raise_no_warning(tmp_path: Path) -> None:
    assert _warnings(tmp_path, CLEAN) == []
    assert lint_policies(POLICIES_DIR) == []
    assert main(["policy", "validate", "--strict", "--policies", str(POLICIES_DIR)]) == 0


def test_a_memory_enabled_workspace_without_redaction_warns_at_memory_enabled(
    tmp_path: Path,
) -> None:
    text = re.sub(r"    redaction:\n(      .*\n|        .*\n)+", "", CLEAN)
    assert "redaction" not in text
    line = _line_of(text, "    memory_enabled: true")
    assert _warnings(tmp_path, text) == [("no-redaction-rule", line)]


def test_a_closed_workspace_without_redaction_does_not_warn(tmp_path: Path) -> None:
    text = CLEAN + "  archive:\n    memory_enabled: false\n"
    assert _warnings(tmp_path, text) == []


def test_a_reading_grant_no_redaction_rule_selects_warns_at_the_grant(tmp_path: Path) -> None:
    rule = '        roles: [adviser]\n        purposes: ["purpose:advice"]\n        allowed'
    assert rule in CLEAN
    text = CLEAN.replace(rule, rule.replace("purpose:advice", "purpose:audit"))
    line = _line_of(text, 'principal: "user:ann"')
    assert _warnings(tmp_path, text) == [("unredacted-grant", line)]
    by_principal = text.replace(
        '        roles: [adviser]\n        purposes: ["purpose:audit"]',
        '        principals: ["user:ann"]',
    )
    assert _warnings(tmp_path, by_principal) == []


def test_adjudication_without_a_maintain_operator_warns_at_the_adjudicate_rule(
    tmp_path: Path,
) -> None:
    text = CLEAN.replace("[read, maintain]", "[read]")
    assert _warnings(tmp_path, text) == [("no-maintainer", _line_of(text, "adjudicate:"))]


def test_the_default_otherwise_alone_makes_adjudication_possible(tmp_path: Path) -> None:
    text = CLEAN.replace(
        '      adjudicate:\n        source_ref_prefixes: ["source:external/"]\n', ""
    ).replace('    maintenance:\n      operators:\n        "human:olga": [read, maintain]\n', "")
    assert _warnings(tmp_path, text) == [("no-maintainer", _line_of(text, "admission:"))]
    rejecting = text.replace("      accept:", "      otherwise: reject\n      accept:")
    assert _warnings(tmp_path, rejecting) == []


@pytest.mark.parametrize(
    ("prefix", "warning_id"),
    [
        ("evidence", "untyped-prefix"),
        ("evidence:", "whole-type-prefix"),
        ("evidence:ticket", "prefix-not-at-boundary"),
    ],
)
def test_an_accept_prefix_matching_more_than_it_names_warns_at_its_line(
    tmp_path: Path, prefix: str, warning_id: str
) -> None:
    text = CLEAN.replace('["evidence:ticket/"]', f'["{prefix}"]')
    assert _warnings(tmp_path, text) == [(warning_id, _line_of(text, f'["{prefix}"]'))]


def test_an_accept_prefix_under_a_reject_prefix_is_shadowed(tmp_path: Path) -> None:
    text = CLEAN.replace('["evidence:ticket/"]', '["evidence:untrusted/tickets/"]')
    line = _line_of(text, "evidence:untrusted/tickets/")
    assert _warnings(tmp_path, text) == [("shadowed-prefix", line)]


def test_a_reject_prefix_carved_out_of_an_accept_prefix_does_not_warn(tmp_path: Path) -> None:
    text = CLEAN.replace('["evidence:untrusted/"]', '["evidence:ticket/forged/"]')
    assert _warnings(tmp_path, text) == []


def test_a_prefix_covered_by_another_in_the_same_list_is_redundant(tmp_path: Path) -> None:
    text = CLEAN.replace(
        '["evidence:untrusted/"]', '["evidence:untrusted/", "evidence:untrusted/old/"]'
    )
    assert _warnings(tmp_path, text) == [
        ("redundant-prefix", _line_of(text, "evidence:untrusted/old/"))
    ]


@pytest.mark.parametrize(
    ("before", "after", "needle"),
    [
        ('principal: "user:ann"', 'principal: "ann"', '"ann"'),
        ('["purpose:advice"]', '["advice"]', '"advice"'),
        ('"family:advice-notes"', '"advice-notes"', '"advice-notes"'),
        ("advisers\n", 'advisers\n        principals: ["ann"]\n', '"ann"'),
        (
            "true\nworkspaces:",
            'true\nretention:\n  retain:\n    principals: ["ann"]\nworkspaces:',
            '"ann"',
        ),
    ],
)
def test_an_identifier_without_its_type_prefix_warns_at_its_line(
    tmp_path: Path, before: str, after: str, needle: str
) -> None:
    assert before in CLEAN
    text = CLEAN.replace(before, after)
    lines = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    assert _warnings(tmp_path, text) == [("missing-type-prefix", line) for line in lines]


def test_an_operator_without_human_prefix_stays_an_error(tmp_path: Path) -> None:
    text = CLEAN.replace('"human:olga"', '"olga"')
    code = main(["policy", "validate", "--policies", str(_write(tmp_path, text))])
    assert code == 2


def test_warnings_exit_0_without_strict_and_1_with_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _write(tmp_path, CLEAN.replace('principal: "user:ann"', 'principal: "ann"'))
    assert main(["policy", "validate", "--policies", str(directory)]) == 0
    printed = capsys.readouterr().out
    line = _line_of(CLEAN, 'principal: "user:ann"')
    assert f"bank.yaml:{line}: warning: " in printed
    assert "[missing-type-prefix]" in printed
    assert main(["policy", "validate", "--strict", "--policies", str(directory)]) == 1


def test_errors_exit_2_even_with_strict(tmp_path: Path) -> None:
    directory = _write(tmp_path, CLEAN.replace("tenant: bank\n", "tenant: bank\nflavour: x\n"))
    assert main(["policy", "validate", "--strict", "--policies", str(directory)]) == 2


def test_a_duplicate_key_and_errors_in_its_value_are_reported_at_the_duplicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # YAML keeps the second `advice`; its problems (a bad value, a grant missing its
    # roles) must point into it, never at the first one's lines.
    text = (
        CLEAN + '  advice:\n    memory_enabled: maybe\n    grants:\n      - principal: "user:ann"\n'
    )
    duplicate = _line_of(text, "  advice:", 2)
    assert main(["policy", "validate", "--policies", str(_write(tmp_path, text))]) == 2
    problems = capsys.readouterr().err
    assert f"bank.yaml:{duplicate}: workspaces.advice: duplicate key" in problems
    assert f"bank.yaml:{duplicate + 1}: workspaces.advice.memory_enabled:" in problems
    assert f"bank.yaml:{duplicate + 3}: workspaces.advice.grants[0].roles:" in problems
    for first_value in (_line_of(text, "    memory_enabled: true"), _line_of(text, "roles: [")):
        assert f"bank.yaml:{first_value}:" not in problems
