"""Content classifiers for the author (issue 22 item 1): what `policy validate` refuses or
warns about, `policy try-pattern` on a classifier, `policy test` tables stating
`expect_classifiers`, and `policy explain` / `effective` showing classifiers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engram_memory.cli.main import main
from engram_memory.contract.exceptions import PolicyDataError
from engram_memory.policy.authoring.data import load_policies
from engram_memory.policy.authoring.data_compiler import compile_policies
from engram_memory.policy.authoring.lint import lint_policies
from tests.cli_runner import run_cli
from tests.policy.conftest import POLICIES_DIR, REGO_DIR
from tests.policy.test_lint import CLEAN, _line_of, _warnings, _write

ENV = {"PATH": os.environ.get("PATH", "")}

CLASSIFIED = (
    CLEAN.replace(
        "workspaces:\n",
        "classifiers:\n"
        "  - name: customer\n"
        "    terms: [customer, Kunde]\n"
        "    kinds: [primary, context]\n"
        "workspaces:\n",
    )
    .replace(
        '      adjudicate:\n        source_ref_prefixes: ["source:external/"]\n',
        "      adjudicate:\n"
        '        source_ref_prefixes: ["source:external/"]\n'
        "        classifiers: [customer, iban]\n",
    )
    .replace(
        "    reconciliation:\n",
        "    classifiers:\n      - name: iban\n        detector: iban\n    reconciliation:\n",
    )
)


def _problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(PolicyDataError) as caught:
        load_policies(_write(tmp_path, text))
    return caught.value.problems


def test_a_well_formed_classifier_set_validates_and_compiles(tmp_path: Path) -> None:
    policies = _write(tmp_path, CLASSIFIED)
    assert lint_policies(policies) == []
    ws = compile_policies(policies)["engram"]["config"]["tenants"]["bank"]["workspaces"]["advice"]
    assert ws["classifiers"] == [
        {
            "name": "customer",
            "kinds": ["context", "primary"],
            "terms": ["Kunde", "customer"],
            "case_sensitive": False,
            "whole_words": True,
        },
        {"name": "iban", "detector": "iban"},
    ]
    assert ws["admission"]["adjudicate"]["classifiers"] == ["customer", "iban"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (("    kinds: [primary, context]", "    kinds: [primary, body]"), "kinds: [primary, body]"),
        (("    terms: [customer, Kunde]", "    regex: '(a+)+'"), "regex: '(a+)+'"),
        (("    terms: [customer, Kunde]", "    regex: '(a)\\1'"), "regex: '(a)"),
        (("        detector: iban", "        detector: passport"), "detector: passport"),
        (("        detector: iban", "        detector: iban\n        region: DE"), "- name: iban"),
        (
            ("    terms: [customer, Kunde]", "    terms: [customer]\n    detector: email"),
            "- name: customer",
        ),
        (("        classifiers: [customer, iban]", "        classifiers: [custmer]"), "custmer"),
        (  # a redaction rule naming a classifier the workspace does not run
            (
                "        allowed_fields: [/components]",
                "        allowed_fields: [/components]\n        classifiers: [customer, cutsomer]",
            ),
            "cutsomer",
        ),
        (  # the tenant already defines `customer`
            (
                "      - name: iban",
                "      - name: customer\n        detector: email\n      - name: iban",
            ),
            "      - name: customer",
        ),
    ],
)
def test_classifier_mistakes_are_errors_at_their_line(
    tmp_path: Path, change: tuple[str, str], needle: str
) -> None:
    text = CLASSIFIED.replace(*change)
    assert text != CLASSIFIED
    problems = _problems(tmp_path, text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{tmp_path / 'bank.yaml'}:{_line_of(text, needle)}:")


def test_a_classifier_matching_most_ordinary_text_is_a_warning(tmp_path: Path) -> None:
    text = CLASSIFIED.replace("    terms: [customer, Kunde]", "    terms: [the]")
    (warning,) = lint_policies(_write(tmp_path, text))
    assert (warning.warning_id, warning.line) == (
        "classifier-matches-most-text",
        _line_of(text, "- name: customer"),
    )
    # A customer classifier matches the corpus's customer sentences only: no warning.
    assert lint_policies(_write(tmp_path, CLASSIFIED)) == []


def test_try_pattern_shows_where_a_classifier_matches(tmp_path: Path) -> None:
    policies = _write(tmp_path, CLASSIFIED)
    common = ["policy", "try-pattern", "--policies", str(policies)]
    hit = run_cli(ENV, *common, "customer", "Der KUNDE und die Kundin")
    assert hit.returncode == 0
    assert "[4:9] 'kunde'" in hit.stdout
    assert "applies to component kinds: context, primary" in hit.stdout
    iban = run_cli(ENV, *common, "iban", "to DE89 3704 0044 0532 0130 00.")
    assert iban.returncode == 0
    assert "[3:30] 'DE89 3704 0044 0532 0130 00'" in iban.stdout
    assert run_cli(ENV, *common, "iban", "to DE89 3704 0044 0532 0130 01.").returncode == 1
    assert run_cli(ENV, *common, "nope", "x").returncode == 2


TABLE = """\
binding: {tenant: acme, workspace: accounts, principal: "user:alice", purpose: "purpose:p"}
cases:
  - name: right names
    call: {tool: engram_memory_capture}
    text: "Kunde DE89 3704 0044 0532 0130 00"
    expect_classifiers: [customer, iban]
  - name: wrong names (on purpose)
    call: {tool: engram_memory_capture}
    text: "nothing here"
    expect_classifiers: [customer]
"""


def test_a_table_states_which_classifiers_match_sample_text(
    opa_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policies = tmp_path / "policies"
    (policies / "tests").mkdir(parents=True)
    for path in POLICIES_DIR.glob("*.yaml"):
        (policies / path.name).write_bytes(path.read_bytes())
    (policies / "tests" / "classifiers.yaml").write_text(TABLE)
    code = main(["policy", "test", "--rego", str(REGO_DIR), "--policies", str(policies), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    tables = {t["name"]: t for t in report["tests"] if t["kind"] == "table"}
    assert tables["right names"]["passed"] is True
    assert tables["wrong names (on purpose)"]["details"] == [
        'classifiers: expected ["customer"], got []'
    ]


def test_explain_runs_the_classifiers_on_text_and_effective_lists_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    binding = ["--tenant", "acme", "--workspace", "accounts", "--principal", "user:alice"]
    binding += ["--purpose", "purpose:support-case", "--policies", str(POLICIES_DIR)]
    admission = ["--tool", "engram_memory_request_admission", "--evidence-ref", "evidence:ticket/1"]
    assert main(["policy", "explain", *binding, *admission, "--text", "a Kunde", "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    (domain,) = [d for d in explained["domains"] if d["domain"] == "admission"]
    assert domain["input"]["classifiers"] == {"decision": ["customer"], "primary": ["customer"]}
    assert domain["summary"]["reasons"] == ["adjudicate_classifier:customer"]
    assert any("classifiers[0]" in s["source"] for s in domain["sources"])

    assert main(["policy", "explain", *binding, *admission, "--text", "a parcel", "--json"]) == 0
    (plain,) = [
        d for d in json.loads(capsys.readouterr().out)["domains"] if d["domain"] == "admission"
    ]
    assert plain["input"]["classifiers"] == {}
    assert plain["summary"]["outcome"] == "accept"

    assert main(["policy", "effective", *binding, "--json"]) == 0
    effective = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in effective["classifiers"]] == ["customer", "iban", "payment-card"]


def test_the_diff_corpus_asks_admission_with_every_classifier_name() -> None:
    from engram_memory.policy.authoring.decision_corpus import generate_calls

    calls = generate_calls(compile_policies(POLICIES_DIR))
    asked = {
        (c.policy_input["workspace"], name)
        for c in calls
        if c.domain == "admission" and "classifiers" in c.policy_input
        for name in c.policy_input["classifiers"]["primary"]
    }
    assert {("accounts", n) for n in ("customer", "iban", "payment-card")} <= asked


CUSTOMER_RULE = (
    "      - name: customer-records\n"
    "        classifiers: [customer]\n"
    "        allowed_fields: [/record_digest]\n"
)


def test_a_redaction_rule_naming_classifiers_compiles_and_shadows_only_its_own_records(
    tmp_path: Path,
) -> None:
    # First: it applies only where `customer` matched, so the rule after it still applies.
    text = CLASSIFIED.replace("    redaction:\n", "    redaction:\n" + CUSTOMER_RULE)
    assert _warnings(tmp_path, text) == []
    ws = compile_policies(_write(tmp_path, text))["engram"]["config"]["tenants"]["bank"]
    (first, _) = ws["workspaces"]["advice"]["redaction"]
    assert first["classifiers"] == ["customer"]
    # Last, after a rule for the same callers without classifiers: it never applies.
    later = CLASSIFIED.replace(
        "        allowed_fields: [/components]\n",
        "        allowed_fields: [/components]\n"
        + CUSTOMER_RULE.replace(
            "        classifiers",
            '        roles: [adviser]\n        purposes: ["purpose:advice"]\n        classifiers',
        ),
    )
    assert _warnings(tmp_path, later) == [
        ("shadowed-redaction-rule", _line_of(later, "- name: customer-records"))
    ]


def test_explain_and_effective_show_the_redaction_of_a_classified_record(
    capsys: pytest.CaptureFixture[str],
) -> None:
    binding = ["--tenant", "acme", "--workspace", "accounts", "--principal", "user:zoe"]
    binding += ["--purpose", "purpose:support-case", "--group", "group:support-advisors"]
    binding += ["--policies", str(POLICIES_DIR)]
    get = ["--tool", "engram_memory_get", "--json"]
    assert main(["policy", "explain", *binding, *get, "--text", "The customer called."]) == 0
    (authz,) = [d for d in json.loads(capsys.readouterr().out)["domains"] if d["domain"] == "authz"]
    assert authz["input"]["classifiers"] == {"decision": ["customer"], "primary": ["customer"]}
    assert authz["summary"]["redaction_rule"] == "customer-record-reader-view"
    assert any("redaction[2]" in s["source"] for s in authz["sources"])
    assert main(["policy", "explain", *binding, *get]) == 0
    (plain,) = [d for d in json.loads(capsys.readouterr().out)["domains"] if d["domain"] == "authz"]
    assert plain["input"]["classifiers"] == {}
    assert plain["summary"]["redaction_rule"] == "account-reader-view"

    assert main(["policy", "effective", *binding, "--json"]) == 0
    tools = json.loads(capsys.readouterr().out)["tools"]
    for tool in ("engram_memory_search", "engram_memory_get"):
        assert tools[tool]["redaction"]["rule"] == "account-reader-view"
        (name,) = tools[tool]["redaction_when_matched"]
        assert name == "customer"
        assert tools[tool]["redaction_when_matched"][name]["rule"] == "customer-record-reader-view"


def test_the_diff_corpus_asks_the_redaction_of_a_read_with_every_classifier_name() -> None:
    from engram_memory.policy.authoring.decision_corpus import generate_calls

    calls = generate_calls(compile_policies(POLICIES_DIR))
    asked = {
        (c.policy_input["workspace"], c.policy_input["tool"], name)
        for c in calls
        if c.domain == "authz" and "classifiers" in c.policy_input
        for name in c.policy_input["classifiers"]["primary"]
    }
    for tool in ("engram_memory_search", "engram_memory_get"):
        assert ("accounts", tool, "customer") in asked
