"""The OPA fleet kit (examples/opa/) passes the pinned OPA's gates: the mask policy is
formatted, strict-checked, annotated and tested at 100 %, and masks what the kit promises."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.opa

KIT = Path(__file__).resolve().parents[2] / "examples" / "opa"


def _opa(opa_bin: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(opa_bin), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        input=stdin,
    )


def test_the_mask_policy_is_formatted_and_passes_opa_check_strict(opa_bin: Path) -> None:
    formatted = _opa(opa_bin, "fmt", "--list", "--fail", str(KIT))
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    checked = _opa(opa_bin, "check", "--strict", str(KIT))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_mask_policy_tests_pass_with_full_coverage(opa_bin: Path) -> None:
    completed = _opa(opa_bin, "test", "--coverage", "--format=json", str(KIT))
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["coverage"] == 100


def test_the_mask_policy_carries_metadata_and_an_entrypoint(opa_bin: Path) -> None:
    completed = _opa(opa_bin, "inspect", "--annotations", "--format=json", str(KIT / "mask.rego"))
    assert completed.returncode == 0, completed.stderr
    annotations = json.loads(completed.stdout)["annotations"]
    package = [a for a in annotations if a["annotations"]["scope"] == "package"]
    assert package
    assert package[0]["annotations"]["title"]
    entrypoints = [a for a in annotations if a["annotations"].get("entrypoint")]
    assert [a["path"][-1]["value"] for a in entrypoints] == ["mask"]


@pytest.mark.parametrize(
    ("decision_input", "masked"),
    [
        (
            {"tenant": "acme", "principal": "user:a", "purpose_ref": "p", "tool": "t"},
            ["/input/principal", "/input/purpose_ref"],
        ),
        ({"tenant": "acme", "workspace": "w"}, []),
        (["not", "an", "object"], ["/input"]),
    ],
)
def test_the_mask_names_the_identifiers_of_a_decision_input(
    opa_bin: Path, decision_input: object, masked: list[str]
) -> None:
    completed = _opa(
        opa_bin,
        "eval",
        "--format=json",
        "--stdin-input",
        "--data",
        str(KIT / "mask.rego"),
        "data.system.log.mask",
        stdin=json.dumps({"input": decision_input}),
    )
    assert completed.returncode == 0, completed.stderr
    value = json.loads(completed.stdout)["result"][0]["expressions"][0]["value"]
    assert sorted(value) == masked


def test_the_configuration_verifies_signatures_polls_and_masks() -> None:
    config = yaml.safe_load((KIT / "config.yaml").read_text("utf-8"))
    bundle = config["bundles"]["engram"]
    assert bundle["signing"]["keyid"] in config["keys"]
    assert config["keys"][bundle["signing"]["keyid"]]["algorithm"] == "RS256"
    assert 0 < bundle["polling"]["min_delay_seconds"] <= bundle["polling"]["max_delay_seconds"]
    assert bundle["service"] in config["services"]
    assert config["decision_logs"]["mask_decision"] == "system/log/mask"
    assert config["status"]
