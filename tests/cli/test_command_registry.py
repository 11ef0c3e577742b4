"""The command registry (`cli.main.COMMANDS`) cannot rot: every entry's module exists, builds
its parser under the registry's name and help line, and runs through `run(args)`."""

from __future__ import annotations

import argparse
import importlib

import pytest

from engram_memory.cli.main import COMMANDS, build_parser, chosen_command, main


def _words(text: str) -> str:
    return " ".join(text.split())  # argparse wraps help lines


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_entry_builds_its_parser_under_the_registry_name_and_help(command: str) -> None:
    module_name, help_line = COMMANDS[command]
    module = importlib.import_module(module_name)
    assert callable(module.run)
    parser = build_parser(command)
    # The listing shows the module's own help line for the command it built: the same text.
    assert _words(help_line) in _words(parser.format_help())
    with pytest.raises(SystemExit) as shown:
        parser.parse_args([command, "--help"])
    assert shown.value.code == 0


def test_help_lists_every_registered_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as shown:
        main(["--help"])
    assert shown.value.code == 0
    out = _words(capsys.readouterr().out)
    for help_line in (help_line for _module, help_line in COMMANDS.values()):
        assert _words(help_line) in out
    listed = out.split("{", 1)[1].split("}", 1)[0].split(",")
    assert listed == list(COMMANDS)


@pytest.mark.parametrize("argv", [["no-such-command"], [], ["--no-such-option"]])
def test_an_unknown_or_missing_command_is_argparses_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2


def test_the_chosen_command_is_the_first_word_that_is_not_an_option() -> None:
    assert chosen_command(["--help"]) is None
    assert chosen_command(["-h", "gateway", "--config", "x"]) == "gateway"
    assert chosen_command(["audit", "verify"]) == "audit"


def test_a_command_parsed_runs_its_modules_run() -> None:
    args = build_parser("audit").parse_args(["audit", "principal-ref", "acme", "user:ann"])
    assert isinstance(args, argparse.Namespace)
    audit = importlib.import_module(COMMANDS["audit"][0])
    assert args.handler is audit.run
