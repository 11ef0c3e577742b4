"""The refusal-storm bound is configurable (flag over environment over default), and an
unusable value is one named configuration error."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.core.service_config import load_config


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    root, _, public = init_host_dir(tmp_path / "secrets")
    return {"ENGRAM_ROOT_KEY": str(root), "ENGRAM_HOST_KEYS": str(public)}


def test_the_bound_defaults_to_ten_entries_per_minute(env: dict[str, str]) -> None:
    config = load_config({}, env)
    assert (config.refusal_burst, config.refusal_interval_s) == (10, 60)


def test_a_flag_overrides_the_environment(env: dict[str, str]) -> None:
    config = load_config(
        {"refusal_burst": "3"},
        {**env, "ENGRAM_REFUSAL_BURST": "7", "ENGRAM_REFUSAL_INTERVAL_S": "5"},
    )
    assert (config.refusal_burst, config.refusal_interval_s) == (3, 5)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ENGRAM_REFUSAL_BURST", "-1"),
        ("ENGRAM_REFUSAL_BURST", "many"),
        ("ENGRAM_REFUSAL_INTERVAL_S", "0"),
        ("ENGRAM_REFUSAL_INTERVAL_S", "1.5"),
    ],
)
def test_an_unusable_bound_is_a_named_configuration_error(
    env: dict[str, str], variable: str, value: str
) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        load_config({}, {**env, variable: value})
