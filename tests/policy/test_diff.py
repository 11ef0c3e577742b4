"""`policy diff A B`: data changes in YAML terms, Rego changes, and the decisions that change,
each side evaluated by the Wasm the pinned OPA compiles."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engram_memory.cli.main import main
from engram_memory.policy.authoring.build import build_bundle
from engram_memory.policy.authoring.data_diff import diff_data
from engram_memory.policy.authoring.decision_corpus import generate_calls
from tests.policy.conftest import REGO_DIR

BANK = """\
schema_version: 1
tenant: bank
memory_enabled: true
workspaces:
  advice:
    memory_enabled: true
    roles:
      adviser: [engram_memory_search, engram_memory_get]
      contributor: [engram_memory_search, engram_memory_get, engram_memory_capture]
    grants:
      - principal: "user:ann"
        roles: [adviser]
        purposes: ["purpose:advice"]
    redaction:
      - name: advisers
        roles: [adviser, contributor]
        allowed_fields: [/components]
    maintenance:
      operators:
        "human:olga": [read, maintain]
"""


def _line_of(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if needle in line)


def _source_tree(root: Path, bank_yaml: str = BANK) -> Path:
    shutil.copytree(REGO_DIR, root / "rego")
    (root / "policies").mkdir()
    (root / "policies" / "bank.yaml").write_text(bank_yaml, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def base_bundle(opa_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = _source_tree(tmp_path_factory.mktemp("base-tree"))
    out = tmp_path_factory.mktemp("base-bundle")
    build_bundle(
        tree / "rego", tree / "policies", out, label="base", opa_bin=opa_bin, run_tests=False
    )
    return out


def _diff(
    a: Path, b: Path, opa_bin: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any]]:
    code = main(["policy", "diff", str(a), str(b), "--json", "--opa", str(opa_bin)])
    return code, json.loads(capsys.readouterr().out)


def test_a_grant_that_gains_a_role_is_reported_in_yaml_terms_and_flips_decisions(
    base_bundle: Path, opa_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = _source_tree(
        tmp_path, BANK.replace("roles: [adviser]\n", "roles: [adviser, contributor]\n")
    )
    code, report = _diff(base_bundle, tree, opa_bin, capsys)
    assert code == 1
    assert report["behaviour_changed"] is True
    grant_line = _line_of(BANK, 'principal: "user:ann"')
    assert report["data_changes"] == [
        {
            "scope": "bank/advice",
            "change": "grant user:ann gained role contributor",
            "location": f"{tree / 'policies' / 'bank.yaml'}:{grant_line}",
        }
    ]
    assert report["rego_changes"] == []
    flipped = {
        (change["domain"], change["input"]["principal"], change["input"].get("tool"))
        for change in report["decision_changes"]
        if change["input"].get("purpose_ref") == "purpose:advice"
    }
    assert ("authz", "user:ann", "engram_memory_capture") in flipped
    assert ("discovery", "user:ann", None) in flipped
    capture = next(
        change
        for change in report["decision_changes"]
        if change["domain"] == "authz" and change["input"].get("tool") == "engram_memory_capture"
    )
    assert (capture["a"]["allow"], capture["b"]["allow"]) == (False, True)
    # Only ann, only with her granted purpose, only in bank/advice: nobody else changed.
    assert {
        (c["input"]["tenant"], c["input"]["workspace"], c["input"].get("principal"))
        for c in report["decision_changes"]
    } == {("bank", "advice", "user:ann")}


def test_the_text_report_names_the_change_and_exits_1(
    base_bundle: Path, opa_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = _source_tree(
        tmp_path, BANK.replace('"human:olga": [read, maintain]', '"human:olga": [read]')
    )
    assert main(["policy", "diff", str(base_bundle), str(tree), "--opa", str(opa_bin)]) == 1
    out = capsys.readouterr().out
    assert "bank/advice: operator human:olga lost authority maintain" in out
    assert "maintenance bank/advice human:olga maintain: allow true -> false" in out


def test_identical_inputs_exit_0_with_nothing_listed(
    base_bundle: Path, opa_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _diff(base_bundle, _source_tree(tmp_path), opa_bin, capsys)
    assert code == 0
    assert report["calls_evaluated"] > 100
    assert (report["data_changes"], report["rego_changes"]) == ([], [])
    assert report["decision_changes"] == []
    assert main(["policy", "diff", str(base_bundle), str(base_bundle), "--opa", str(opa_bin)]) == 0


def test_a_rego_formatting_change_that_decides_the_same_is_listed_but_exits_0(
    base_bundle: Path, opa_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = _source_tree(tmp_path)
    module = tree / "rego" / "engram" / "authz" / "authz.rego"
    text = module.read_text(encoding="utf-8")
    module.write_text(
        text.replace("import data.engram.common\n", "import data.engram.common\n\n# reviewed\n"),
        encoding="utf-8",
    )
    code, report = _diff(base_bundle, tree, opa_bin, capsys)
    assert code == 0
    assert [(c["module"], c["change"]) for c in report["rego_changes"]] == [
        ("engram/authz/authz.rego", "changed")
    ]
    assert "+# reviewed" in report["rego_changes"][0]["unified_diff"]
    assert report["decision_changes"] == []


def test_a_data_change_no_call_can_observe_is_listed_but_exits_0(
    base_bundle: Path, opa_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unused_role = BANK.replace("    grants:", "      auditor: [engram_memory_search]\n    grants:")
    tree = _source_tree(tmp_path, unused_role)
    # A is the source tree here, so the role is located in A's YAML.
    code, report = _diff(tree, base_bundle, opa_bin, capsys)
    assert code == 0
    assert report["data_changes"] == [
        {
            "scope": "bank/advice",
            "change": "role auditor removed",
            "location": f"{tree / 'policies' / 'bank.yaml'}:{_line_of(unused_role, 'auditor:')}",
        }
    ]


def test_a_rego_change_that_changes_decisions_exits_1(
    base_bundle: Path, opa_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = _source_tree(tmp_path)
    module = tree / "rego" / "engram" / "maintenance" / "maintenance.rego"
    text = module.read_text(encoding="utf-8")
    assert '"authority_not_held"' in text
    module.write_text(text.replace('"authority_not_held"', '"not_held"'), encoding="utf-8")
    code, report = _diff(base_bundle, tree, opa_bin, capsys)
    assert code == 1
    assert {c["domain"] for c in report["decision_changes"]} == {"maintenance"}


@pytest.mark.parametrize("broken", ["missing", "empty-dir", "bad-yaml"])
def test_bad_input_exits_2(base_bundle: Path, opa_bin: Path, tmp_path: Path, broken: str) -> None:
    target = tmp_path / "side"
    if broken == "empty-dir":
        target.mkdir()
    elif broken == "bad-yaml":
        _source_tree(
            target, BANK.replace("memory_enabled: true\nworkspaces", "flavour: x\nworkspaces")
        )
    code = main(["policy", "diff", str(base_bundle), str(target), "--opa", str(opa_bin)])
    assert code == 2


def test_a_bundle_that_does_not_match_its_lock_exits_2(
    base_bundle: Path, opa_bin: Path, tmp_path: Path
) -> None:
    tampered = tmp_path / "tampered"
    shutil.copytree(base_bundle, tampered)
    (tampered / "policy.wasm").write_bytes(b"\0asm")
    code = main(["policy", "diff", str(base_bundle), str(tampered), "--opa", str(opa_bin)])
    assert code == 2


def _document(workspace: dict[str, Any]) -> dict[str, Any]:
    tenant = {"memory_enabled": True, "workspaces": {"advice": workspace}}
    return {"engram": {"config": {"tenants": {"bank": tenant}}}}


def test_group_grants_are_diffed_by_group_and_asked_as_a_member_of_the_group() -> None:
    before = _document({"groups": {"group:advisers": [{"roles": ["adviser"]}]}})
    after = _document({"groups": {"group:advisers": [{"roles": ["adviser", "auditor"]}]}})
    assert [str(change) for change in diff_data(before, after)] == [
        "bank/advice: grant group:advisers gained role auditor"
    ]
    members = {
        (call.policy_input["principal"], tuple(call.policy_input["groups"]))
        for call in generate_calls(before, after)
        if "groups" in call.policy_input
    }
    assert members == {("user:engram-diff-unlisted", ("group:advisers",))}


def test_data_changes_read_as_the_yaml_an_author_wrote() -> None:
    before = _document(
        {
            "roles": {"adviser": ["engram_memory_search"]},
            "principals": {"user:ann": [{"roles": ["adviser"]}]},
            "redaction": [
                {"name": "first", "allowed_fields": ["/components"]},
                {"name": "second", "allowed_fields": [""]},
            ],
            "retention": {"ceiling_ms": 31_536_000_000},
            "rate_limits": [{"name": "desk", "calls": 10, "per_ms": 60_000}],
            "reconciliation": {"consented_families": {}},
        }
    )
    after = _document(
        {
            "roles": {"adviser": ["engram_memory_get", "engram_memory_search"]},
            "principals": {"user:ann": [{"roles": ["adviser"], "purposes": ["purpose:advice"]}]},
            "redaction": [
                {"name": "second", "allowed_fields": [""]},
                {"name": "first", "allowed_fields": ["/components", "/citations"]},
            ],
            "retention": {"ceiling_ms": 15_552_000_000},
            "rate_limits": [{"name": "desk", "calls": 10, "per_ms": 120_000}],
            "reconciliation": {"consented_families": {"family:notes": True}},
        }
    )
    assert [str(change) for change in diff_data(before, after)] == [
        "bank/advice: grant user:ann now limited to purposes [purpose:advice]",
        "bank/advice: rate limit desk: per 1m -> 2m",
        "bank/advice: reconciliation.consented_families gained family family:notes",
        "bank/advice: redaction rule first: allowed_fields gained field /citations",
        "bank/advice: redaction rules reordered: second, first (first match wins)",
        "bank/advice: retention.ceiling 365d -> 180d",
        "bank/advice: role adviser gained tool engram_memory_get",
    ]
    assert diff_data(before, before) == []
