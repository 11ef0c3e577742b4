"""`engram-memory policy ...` and choosing an engine from configuration."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from engram_memory.cli import policy as cli
from engram_memory.contract.exceptions import ConfigurationError, PolicyDataError
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.factory import open_policy_engine
from tests.policy.conftest import fixed_clock, subject


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command"))
    return cli.run(parser.parse_args(["policy", *argv]))


def test_policy_check_passes_for_the_shipped_bundle() -> None:
    assert _run("check") == 0


def test_policy_validate_reports_bad_yaml_as_policy_data_error(tmp_path: Path) -> None:
    (tmp_path / "acme.yaml").write_text("schema_version: 1\ntenant: acme\nflavour: x\n")
    with pytest.raises(PolicyDataError):
        _run("validate", "--policies", str(tmp_path))


def test_policy_verify_and_identity_accept_the_shipped_bundle() -> None:
    assert _run("verify") == 0
    assert _run("identity") == 0


def test_the_embedded_engine_is_the_default() -> None:
    with open_policy_engine() as (engine, identity):
        decider = PolicyDecider(engine, identity, fixed_clock)
        assert decider.authz(subject(), "engram_memory_get").allow
        assert engine.engine_id == "opa-wasm-embedded"


def test_an_unknown_engine_name_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError), open_policy_engine("opa"):
        pass


@pytest.mark.opa
def test_opa_spawn_runs_a_private_opa_server(opa_bin: Path) -> None:
    with open_policy_engine("opa-spawn", opa_bin=opa_bin) as (engine, identity):
        decider = PolicyDecider(engine, identity, fixed_clock)
        assert decider.confirmation(subject(), "engram_memory_forget").required
        assert engine.engine_id == "opa-server"


@pytest.mark.opa
def test_an_opa_url_is_queried_with_the_shipped_identity(default_opa_url: str) -> None:
    with open_policy_engine(default_opa_url) as (engine, identity):
        decider = PolicyDecider(engine, identity, fixed_clock)
        assert decider.reconciliation(subject(), []).allow
