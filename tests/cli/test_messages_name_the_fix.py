"""Every refusal of the command line names what the user typed (issue 24, finding 7): the
unknown option itself (not what argparse tripped over next), and a setting as it was given,
flag or environment variable. Assertions are on the exit code and the named token."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engram_memory.cli.main import main
from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.core.service_config import load_config
from engram_memory.transport.http_settings import load_max_request_bytes


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"--?[a-z][a-z-]*|ENGRAM_[A-Z_]+|'[^']*'", text))


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> set[str]:
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2
    # The error line alone: the usage line above it lists every option anyway.
    (error,) = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    return _tokens(error)


@pytest.mark.parametrize(
    ("argv", "named", "suggested"),
    [
        # Before: "the following arguments are required: command".
        (["--verbose"], "--verbose", None),
        # Before: "argument gateway_command: invalid choice: 'x.yaml'".
        (["gateway", "--conifg", "x.yaml", "--check"], "--conifg", "--config"),
        (["serve", "--enable-memroy"], "--enable-memroy", "--enable-memory"),
        (["admin", "--tenant=acme", "--data-dri", "d"], "--data-dri", "--data-dir"),
    ],
)
def test_an_unknown_option_is_the_error_named(
    argv: list[str], named: str, suggested: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = _usage_error(argv, capsys)
    assert named in tokens
    if suggested is not None:
        assert suggested in tokens


def test_a_configuration_file_without_its_option_names_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "--config" in _usage_error(["gateway", "desktop.yaml", "--check"], capsys)


def test_without_an_unknown_option_argparse_names_the_mistake(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "'chek'" in _usage_error(["policy", "chek"], capsys)


@pytest.fixture
def host_keys(tmp_path: Path) -> Path:
    path = tmp_path / "host-keys.pem"
    path.write_text("-----BEGIN PUBLIC KEY-----\n", encoding="utf-8")
    return path


def test_a_setting_given_as_a_flag_is_named_as_the_flag(host_keys: Path) -> None:
    with pytest.raises(ConfigurationError) as refused:
        load_config({"root_key": "/nonexistent/root.key", "host_keys": str(host_keys)}, env={})
    assert "--root-key" in _tokens(str(refused.value))
    assert "ENGRAM_ROOT_KEY" not in _tokens(str(refused.value))


def test_a_setting_given_as_a_variable_is_named_as_the_variable(host_keys: Path) -> None:
    env = {"ENGRAM_ROOT_KEY": "/nonexistent/root.key", "ENGRAM_HOST_KEYS": str(host_keys)}
    with pytest.raises(ConfigurationError) as refused:
        load_config({}, env=env)
    assert "ENGRAM_ROOT_KEY" in _tokens(str(refused.value))
    assert "--root-key" not in _tokens(str(refused.value))


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        ({"max_request_bytes": "0"}, {}, "--max-request-bytes"),
        ({}, {"ENGRAM_MAX_REQUEST_BYTES": "0"}, "ENGRAM_MAX_REQUEST_BYTES"),
    ],
)
def test_http_and_size_settings_name_the_flag_or_variable_given(
    flags: dict[str, str | None], env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        load_max_request_bytes(flags, env)
    assert named in _tokens(str(refused.value))


def test_serve_names_the_flag_the_user_typed(
    tmp_path: Path, host_keys: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--host-keys", str(host_keys), "--root-key", str(tmp_path / "absent.key")]
    assert main(argv) == 2
    assert "--root-key" in _tokens(capsys.readouterr().err)
