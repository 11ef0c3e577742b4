"""Grants by group: the YAML names exactly one of `principal` or `group`, groups compile to
their own lookup table, and the shipped bundle serves a principal through its groups claim."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import PolicyDataError
from engram_memory.policy.authoring.data import load_policies
from engram_memory.policy.authoring.data_compiler import compile_policies
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.receipts import make_receipt
from tests.policy.conftest import POLICIES_DIR, subject

# 13 lines: the second grant's keys are on lines 12 and 13.
TENANT = """\
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
      - group: "group:advisors"
        roles: [reader]
"""


def _problems(tmp_path: Path, text: str) -> tuple[str, ...]:
    (tmp_path / "acme.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(PolicyDataError) as caught:
        load_policies(tmp_path)
    return caught.value.problems


def _located(problem: str, tmp_path: Path, line: int, where: str) -> bool:
    return problem.startswith(f"{tmp_path / 'acme.yaml'}:{line}: {where}:")


def test_group_grants_compile_into_their_own_table(tmp_path: Path) -> None:
    text = TENANT + '        purposes: ["purpose:b", "purpose:a"]\n'
    (tmp_path / "acme.yaml").write_text(text, encoding="utf-8")
    support = compile_policies(tmp_path)["engram"]["config"]["tenants"]["acme"]["workspaces"][
        "support"
    ]
    assert support["principals"] == {"user:bob": [{"roles": ["reader"]}]}
    assert support["groups"] == {
        "group:advisors": [{"roles": ["reader"], "purposes": ["purpose:a", "purpose:b"]}]
    }


def test_a_workspace_without_group_grants_compiles_an_empty_group_table(tmp_path: Path) -> None:
    (tmp_path / "acme.yaml").write_text(TENANT.rsplit("      - group", 1)[0], encoding="utf-8")
    support = compile_policies(tmp_path)["engram"]["config"]["tenants"]["acme"]["workspaces"][
        "support"
    ]
    assert support["groups"] == {}


def test_the_shipped_acme_tenant_grants_support_advisors_by_group() -> None:
    support = compile_policies(POLICIES_DIR)["engram"]["config"]["tenants"]["acme"]["workspaces"][
        "support"
    ]
    assert support["groups"] == {
        "group:support-advisors": [{"roles": ["reader"], "purposes": ["purpose:support-case"]}]
    }


def test_a_grant_naming_both_a_principal_and_a_group_is_reported_at_the_grant(
    tmp_path: Path,
) -> None:
    text = TENANT.replace(
        '- group: "group:advisors"', '- group: "group:advisors"\n        principal: "user:x"'
    )
    (problem,) = _problems(tmp_path, text)
    assert _located(problem, tmp_path, 12, "workspaces.support.grants[1]")


def test_a_grant_naming_neither_is_reported_at_the_grant(tmp_path: Path) -> None:
    text = TENANT.replace('- group: "group:advisors"\n        roles', "- roles")
    (problem,) = _problems(tmp_path, text)
    assert _located(problem, tmp_path, 12, "workspaces.support.grants[1]")


@pytest.mark.parametrize(
    "group",
    [
        '"advisors"',
        '"user:advisors"',
        '"group:"',
        '"group:*"',
        '"group:a\\tb"',
        '"group:' + "a" * 251 + '"',
        "[group:a]",
    ],
)
def test_a_malformed_group_is_reported_at_its_line(tmp_path: Path, group: str) -> None:
    text = TENANT.replace('"group:advisors"', group)
    (problem,) = _problems(tmp_path, text)
    assert _located(problem, tmp_path, 12, "workspaces.support.grants[1].group")


def test_a_group_granted_as_a_principal_is_reported_at_its_line(tmp_path: Path) -> None:
    text = TENANT.replace('- group: "group:advisors"', '- principal: "group:advisors"')
    (problem,) = _problems(tmp_path, text)
    assert _located(problem, tmp_path, 12, "workspaces.support.grants[1].principal")


def test_a_group_grant_of_an_undefined_role_is_reported_at_its_line(tmp_path: Path) -> None:
    text = TENANT[: TENANT.rindex("[reader]")] + "[stewart]\n"
    (problem,) = _problems(tmp_path, text)
    assert _located(problem, tmp_path, 13, r"workspaces.support.grants[1].roles[0]")


ADVISOR = replace(subject(principal="user:zoe"), groups=("group:support-advisors",))


def test_the_shipped_bundle_serves_a_principal_through_its_group(
    default_decider: PolicyDecider,
) -> None:
    result = default_decider.authz(ADVISOR, "engram_memory_get")
    assert result.allow
    assert "grant:group:support-advisors:reader" in result.decision.reasons
    assert result.redaction.allowed_fields  # the support-case view picked the group's role


def test_the_shipped_bundle_refuses_the_same_principal_without_the_claim(
    default_decider: PolicyDecider,
) -> None:
    assert not default_decider.authz(replace(ADVISOR, groups=()), "engram_memory_get").allow


def test_the_group_grant_is_limited_to_its_purpose(default_decider: PolicyDecider) -> None:
    other_purpose = replace(ADVISOR, purpose_ref="purpose:marketing")
    assert not default_decider.authz(other_purpose, "engram_memory_get").allow


def test_a_group_gives_only_the_tools_of_its_role(default_decider: PolicyDecider) -> None:
    discovery = default_decider.discovery(ADVISOR, host_memory_enabled=True)
    assert discovery.visible_tools == {"engram_memory_get", "engram_memory_search"}
    assert not default_decider.authz(ADVISOR, "engram_memory_capture").allow


def test_the_receipt_input_digest_covers_the_groups() -> None:
    def input_digest(groups: tuple[str, ...]) -> str:
        policy_input = replace(ADVISOR, groups=groups).as_input()
        return make_receipt(
            policy_path="engram/authz/decision",
            policy_input=policy_input,
            result={"reasons": ["x"]},
            bundle_revision="r",
            bundle_digest="d",
            engine_id="e",
            engine_version="v",
            decided_at_ms=0,
        ).input_digest

    assert input_digest(("group:a",)) != input_digest(("group:b",)) != input_digest(())


def test_a_selector_naming_a_group_is_reported_at_its_line(tmp_path: Path) -> None:
    rule = '    redaction:\n      - name: advisors\n        principals: ["group:advisors"]\n'
    text = TENANT + rule + "        allowed_fields: [/valid_time]\n"
    (problem,) = _problems(tmp_path, text)
    assert _located(problem, tmp_path, 16, "workspaces.support.redaction[0].principals[0]")
