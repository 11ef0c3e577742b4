"""Compliance-authored YAML: strict validation whose errors name file and line."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import ConfigurationError, PolicyDataError
from engram_memory.contract.types import ToolName
from engram_memory.policy.authoring.data import duration_ms, load_policies
from engram_memory.policy.authoring.data_compiler import compile_policies
from tests.policy.conftest import POLICIES_DIR, TEST_POLICIES_DIR

# 11 lines: anything appended starts at line 12.
VALID = """\
schema_version: 1
tenant: acme
memory_enabled: true
workspaces:
  support:
    memory_enabled: true
    roles:
      reader: [engram_memory_search]
    grants:
      - principal: "user:bob"
        roles: [reader]
"""


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def _problems(directory: Path) -> tuple[str, ...]:
    with pytest.raises(PolicyDataError) as caught:
        load_policies(directory)
    return caught.value.problems


def _located(problem: str, path: Path, line: int, where: str) -> bool:
    return problem.startswith(f"{path}:{line}: {where}:")


def test_the_shipped_sample_policies_compile() -> None:
    config = compile_policies(POLICIES_DIR)["engram"]["config"]
    assert set(config["tenants"]) == {"acme", "globex"}
    support = config["tenants"]["acme"]["workspaces"]["support"]
    assert set(support["roles"]["steward"]) == set(ToolName)
    assert support["principals"]["user:bob"] == [
        {"roles": ["reader"], "purposes": ["purpose:support-case"]}
    ]
    assert support["admission"]["policy_id"] == "acme-support-admission"
    carol = config["tenants"]["globex"]["workspaces"]["main"]["principals"]["user:carol"]
    assert carol == [{"roles": ["steward"]}]


def test_the_rule_covering_test_policies_compile() -> None:
    tenants = compile_policies(TEST_POLICIES_DIR)["engram"]["config"]["tenants"]
    assert set(tenants) == {"t1", "t2", "t3"}
    assert tenants["t1"]["semantic_search"] is True
    assert tenants["t3"]["semantic_search"] is False  # the default: not opted in
    assert tenants["t1"]["workspaces"]["w"]["semantic_search"] == {"purposes": {"pur:a": True}}


def test_compiled_durations_are_milliseconds() -> None:
    assert duration_ms("90d") == 90 * 86_400_000
    assert duration_ms("250ms") == 250
    with pytest.raises(ValueError, match="duration"):
        duration_ms("forever")


def test_policy_data_error_is_a_configuration_error(tmp_path: Path) -> None:
    _write(tmp_path, "acme.yaml", "schema_version: 2\ntenant: acme\n")
    with pytest.raises(ConfigurationError):
        load_policies(tmp_path)


def test_an_unknown_key_is_reported_with_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "acme.yaml", VALID + "    colour: blue\n")
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 12, "workspaces.support.colour")


def test_a_wrong_type_is_reported_at_its_line(tmp_path: Path) -> None:
    text = VALID.replace("memory_enabled: true\n    roles", "memory_enabled: maybe\n    roles")
    path = _write(tmp_path, "acme.yaml", text)
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 6, "workspaces.support.memory_enabled")


def test_an_unknown_tool_in_a_flow_list_is_reported_at_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "acme.yaml", VALID.replace("[engram_memory_search]", "[x_admin]"))
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 8, r"workspaces.support.roles.reader[0]")


def test_a_grant_of_an_undefined_role_is_reported_at_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "acme.yaml", VALID.replace("roles: [reader]", "roles: [stewart]"))
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 11, "workspaces.support.grants[0].roles[0]")


def test_a_default_ttl_beyond_the_ceiling_is_reported(tmp_path: Path) -> None:
    text = VALID + "    retention:\n      ceiling: 30d\n      default_ttl: 90d\n"
    path = _write(tmp_path, "acme.yaml", text)
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 14, "workspaces.support.retention.default_ttl")


def test_a_duplicate_key_is_reported_at_its_second_occurrence(tmp_path: Path) -> None:
    path = _write(tmp_path, "acme.yaml", VALID + "    memory_enabled: false\n")
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 12, "workspaces.support.memory_enabled")


def test_an_unquoted_yaml_boolean_key_is_reported_at_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "acme.yaml", VALID + "  off:\n    memory_enabled: false\n")
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 12, "workspaces.off")


def test_a_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "acme.yaml", "schema_version: 1\ntenant: [acme\n")
    (problem,) = _problems(tmp_path)
    assert re.match(rf"^{re.escape(str(path))}:\d+: <document>:", problem)


def test_every_problem_of_every_file_is_reported_one_per_line(tmp_path: Path) -> None:
    _write(tmp_path, "a.yaml", VALID + "    colour: blue\n    flavour: mint\n")
    _write(tmp_path, "b.yaml", "")
    problems = _problems(tmp_path)
    assert len(problems) == 3
    assert all("\n" not in problem for problem in problems)


def test_a_tenant_defined_twice_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, "a.yaml", VALID)
    second = _write(tmp_path, "b.yaml", VALID)
    (problem,) = _problems(tmp_path)
    assert _located(problem, second, 2, "tenant")


def test_a_wildcard_tenant_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "acme.yaml", VALID.replace("tenant: acme", "tenant: '*'"))
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 2, "tenant")


def test_confirmation_cannot_be_configured_for_always_confirmed_tools(tmp_path: Path) -> None:
    text = VALID + "    confirmation:\n      require:\n        - tool: engram_memory_forget\n"
    path = _write(tmp_path, "acme.yaml", text)
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 14, "workspaces.support.confirmation.require[0].tool")


def test_a_missing_directory_is_a_policy_data_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyDataError):
        load_policies(tmp_path / "absent")


def test_files_other_than_yaml_are_ignored(tmp_path: Path) -> None:
    shutil.copy(POLICIES_DIR / "acme.yaml", tmp_path / "acme.yaml")
    _write(tmp_path, "README.md", "# not policy\n")
    assert set(load_policies(tmp_path)) == {"acme"}


def test_a_never_store_shape_that_does_not_compile_is_reported_at_its_line(
    tmp_path: Path,
) -> None:
    text = (
        VALID + "    never_store:\n      patterns:\n        - name: broken\n          regex: '(['\n"
    )
    path = _write(tmp_path, "acme.yaml", text)
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 15, "workspaces.support.never_store.patterns[0].regex")


def test_tenant_and_workspace_never_store_shapes_add_up(tmp_path: Path) -> None:
    tenant = "never_store:\n  patterns:\n    - {name: t, regex: 'T-[0-9]{4}'}\n"
    workspace = "    never_store:\n      patterns:\n        - {name: w, regex: 'W-[0-9]{4}'}\n"
    _write(
        tmp_path, "acme.yaml", VALID.replace("workspaces:\n", tenant + "workspaces:\n") + workspace
    )
    support = compile_policies(tmp_path)["engram"]["config"]["tenants"]["acme"]["workspaces"]
    # Each carries its name in a regex comment (contract/secrets.py named_pattern).
    assert support["support"]["never_store_patterns"] == [
        "(?#never-store:t)T-[0-9]{4}",
        "(?#never-store:w)W-[0-9]{4}",
    ]


def test_rate_limits_compile_to_milliseconds_sorted_by_name(tmp_path: Path) -> None:
    limits = (
        "    rate_limits:\n"
        "      - {name: z-forgets, calls: 5, per: 1h, tools: [engram_memory_search]}\n"
        "      - {name: a-readers, calls: 600, per: 1m, roles: [reader]}\n"
    )
    _write(tmp_path, "acme.yaml", VALID + limits)
    support = compile_policies(tmp_path)["engram"]["config"]["tenants"]["acme"]["workspaces"]
    assert support["support"]["rate_limits"] == [
        {"name": "a-readers", "calls": 600, "per_ms": 60_000, "roles": ["reader"]},
        {"name": "z-forgets", "calls": 5, "per_ms": 3_600_000, "tools": ["engram_memory_search"]},
    ]


def test_a_duplicate_or_unresolved_rate_limit_is_reported_at_its_line(tmp_path: Path) -> None:
    limits = (
        "    rate_limits:\n"
        "      - {name: burst, calls: 5, per: 1s}\n"
        "      - {name: burst, calls: 9, per: 1s, roles: [stewart]}\n"
    )
    path = _write(tmp_path, "acme.yaml", VALID + limits)
    problems = _problems(tmp_path)
    assert len(problems) == 2
    assert _located(problems[0], path, 14, "workspaces.support.rate_limits[1].name")
    assert _located(problems[1], path, 14, "workspaces.support.rate_limits[1].roles[0]")


def test_approval_rules_compile_with_sorted_tools_and_groups(tmp_path: Path) -> None:
    approval = (
        "    confirmation:\n"
        "      approval:\n"
        "        - name: officers\n"
        "          tools: [engram_memory_withdraw, engram_memory_forget]\n"
        "          groups: ['group:z', 'group:a']\n"
    )
    _write(tmp_path, "acme.yaml", VALID + approval)
    config = compile_policies(tmp_path)["engram"]["config"]
    rules = config["tenants"]["acme"]["workspaces"]["support"]["confirmation"]["approval"]
    assert rules == [
        {
            "name": "officers",
            "tools": ["engram_memory_forget", "engram_memory_withdraw"],
            "not_requester": False,
            "groups": ["group:a", "group:z"],
        }
    ]


def test_an_approval_rule_without_a_condition_is_reported_at_its_line(
    tmp_path: Path,
) -> None:
    approval = (
        "    confirmation:\n"
        "      approval:\n"
        "        - {name: second, tools: [engram_memory_forget], not_requester: true}\n"
        "        - {name: nothing, tools: [engram_memory_forget]}\n"
    )
    path = _write(tmp_path, "acme.yaml", VALID + approval)
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 15, "workspaces.support.confirmation.approval[1]")


def test_a_duplicate_approval_rule_name_is_reported_at_its_line(tmp_path: Path) -> None:
    approval = (
        "    confirmation:\n"
        "      approval:\n"
        "        - {name: second, tools: [engram_memory_forget], not_requester: true}\n"
        "        - {name: second, tools: [engram_memory_forget], groups: ['group:x']}\n"
    )
    path = _write(tmp_path, "acme.yaml", VALID + approval)
    (problem,) = _problems(tmp_path)
    assert _located(problem, path, 15, "workspaces.support.confirmation.approval[1].name")
