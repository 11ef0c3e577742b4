"""`engram-memory policy grant`: the YAML edit an author would make, proven before it is written.

The build with the real OPA after the edit is exercised end to end by
tests/e2e/test_first_hour.py (the documented first-hour path); here the edit itself, its
refusals (which change nothing) and the rollback when the build cannot run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import GrantRefused
from engram_memory.policy.authoring.data import load_policies
from engram_memory.policy.authoring.grant import apply_grant, plan_grant
from tests.cli_runner import run_cli

SHIPPED = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    copy = tmp_path / "policies"
    copy.mkdir()
    for name in ("acme.yaml", "globex.yaml"):
        shutil.copyfile(SHIPPED / name, copy / name)
    return copy


def test_a_grant_is_appended_to_the_workspace_grants_keeping_every_comment(
    policies: Path,
) -> None:
    before = (policies / "acme.yaml").read_text(encoding="utf-8")
    edit = plan_grant(
        policies,
        tenant="acme",
        workspace="support",
        principal="user:zed",
        role="reader",
        purposes=["purpose:support-case"],
    )
    assert (policies / "acme.yaml").read_text(encoding="utf-8") == before  # planned only
    apply_grant(edit)
    after = (policies / "acme.yaml").read_text(encoding="utf-8")
    removed = [line for line in before.splitlines() if line not in after.splitlines()]
    assert removed == []
    assert '+      - principal: "user:zed"' in edit.diff()
    grants = load_policies(policies)["acme"].workspaces["support"].grants
    assert grants[-1].principal == "user:zed"
    assert grants[-1].roles == ["reader"]
    assert grants[-1].purposes == ["purpose:support-case"]
    # Nothing else of the tenant changed.
    shipped = load_policies(SHIPPED)["acme"].workspaces["support"]
    assert grants[:-1] == shipped.grants


def test_a_workspace_without_grants_gets_a_grants_list(policies: Path) -> None:
    text = (policies / "acme.yaml").read_text(encoding="utf-8")
    start = text.index("    grants:\n")
    end = text.index("    redaction:")
    (policies / "acme.yaml").write_text(text[:start] + text[end:], encoding="utf-8")
    assert load_policies(policies)["acme"].workspaces["support"].grants == []
    apply_grant(
        plan_grant(
            policies, tenant="acme", workspace="support", principal="user:zed", role="steward"
        )
    )
    (grant,) = load_policies(policies)["acme"].workspaces["support"].grants
    assert (grant.principal, grant.roles, grant.purposes) == ("user:zed", ["steward"], None)


def test_an_existing_grant_is_not_added_twice(policies: Path) -> None:
    edit = plan_grant(
        policies, tenant="acme", workspace="support", principal="user:alice", role="steward"
    )
    assert not edit.changed
    assert edit.diff() == ""


@pytest.mark.parametrize(
    ("tenant", "workspace", "principal", "role"),
    [
        ("initech", "support", "user:zed", "reader"),  # no such tenant
        ("acme", "sales", "user:zed", "reader"),  # no such workspace
        ("acme", "support", "user:zed", "owner"),  # no such role
        ("acme", "archive", "user:zed", "reader"),  # the closed workspace defines no role
        ("acme", "support", "group:advisors", "reader"),  # a group is not a principal
        ("acme", "support", "user:*", "reader"),  # not an identifier
    ],
)
def test_a_grant_that_cannot_be_made_is_refused_and_changes_nothing(
    policies: Path, tenant: str, workspace: str, principal: str, role: str
) -> None:
    before = {path.name: path.read_bytes() for path in policies.iterdir()}
    with pytest.raises(GrantRefused):
        plan_grant(policies, tenant=tenant, workspace=workspace, principal=principal, role=role)
    assert {path.name: path.read_bytes() for path in policies.iterdir()} == before


def test_invalid_policy_data_is_refused_before_any_edit(policies: Path) -> None:
    (policies / "broken.yaml").write_text("schema_version: 1\ntenant: [x]\n", encoding="utf-8")
    with pytest.raises(GrantRefused, match="policy validate"):
        plan_grant(
            policies, tenant="acme", workspace="support", principal="user:zed", role="reader"
        )


def test_the_command_puts_the_yaml_back_when_the_bundle_cannot_be_built(
    policies: Path, tmp_path: Path
) -> None:
    before = (policies / "acme.yaml").read_bytes()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    result = run_cli(
        env,
        "policy",
        "grant",
        "--policies",
        str(policies),
        "--out",
        str(tmp_path / "bundle"),
        "--opa",
        str(tmp_path / "no-such-opa"),
        "--tenant",
        "acme",
        "--workspace",
        "support",
        "--principal",
        "user:zed",
        "--role",
        "reader",
    )
    assert result.returncode == 2
    assert '+      - principal: "user:zed"' in result.stdout  # the diff it tried
    assert (policies / "acme.yaml").read_bytes() == before
    assert not (tmp_path / "bundle").exists()


def test_the_command_needs_an_output_bundle_for_a_policies_directory_of_its_own(
    policies: Path,
) -> None:
    before = (policies / "acme.yaml").read_bytes()
    result = run_cli(
        {"PATH": os.environ.get("PATH", "")},
        "policy",
        "grant",
        "--policies",
        str(policies),
        "--tenant",
        "acme",
        "--workspace",
        "support",
        "--principal",
        "user:zed",
        "--role",
        "reader",
    )
    assert result.returncode == 2
    assert (policies / "acme.yaml").read_bytes() == before
