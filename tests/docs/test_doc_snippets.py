"""The snippets of README.md and docs/ that a reader copies: valid JSON or TOML, and naming
`engram-memory` commands and options that exist.

Every ```json / ```toml block must parse. A client entry (`mcpServers` / `servers` /
`mcp_servers`) that starts a command must start `engram-memory` with arguments its parser
accepts; one that names a URL must name an http(s) URL. Every `engram-memory` command line of
a ```bash block must name a command and subcommands that exist, and only options they (or the
commands above them) define. What the documented blocks then do is run by
tests/e2e/test_first_hour.py and tests/e2e/test_readme_client_configs.py.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_memory.cli.main import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
CLIENT_MAPS = ("mcpServers", "servers", "mcp_servers")
PROGRAM = re.compile(r"^(?:\S*/)?engram-memory$")


def blocks(language: str) -> Iterator[tuple[str, str]]:
    """(where, text) of every fenced block in `language` of README.md and docs/."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) == language:
                line = text.count("\n", 0, match.start()) + 1
                yield f"{page.relative_to(ROOT)}:{line}", match.group(2)


def _subparsers(
    parser: argparse.ArgumentParser,
) -> tuple[dict[str, argparse.ArgumentParser], bool]:
    """The parser's subcommands, and whether one is required."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            choices: dict[str, argparse.ArgumentParser] = action.choices
            return choices, bool(action.required)
    return {}, False


def command_problems(argv: list[str]) -> list[str]:
    """What is wrong with an `engram-memory` command line's command words and options (its
    values may be placeholders, so they are not parsed)."""
    if not argv or argv[0] not in COMMANDS:
        return [f"no command {argv[:1]}"]
    parser = _subparsers(build_parser(argv[0]))[0][argv[0]]
    chain, rest = [parser], argv[1:]
    while (found := _subparsers(parser))[0]:
        choices, required = found
        position = next((i for i, word in enumerate(rest) if word in choices), None)
        if position is None:
            if not required:
                break
            return [f"{' '.join(argv[:1])}: no subcommand among {rest}"]
        parser = choices[rest[position]]
        chain.append(parser)
        rest = rest[position + 1 :]
    known = {option for p in chain for option in p._option_string_actions}
    options = [word.strip("[]").split("=")[0] for word in argv if word.strip("[").startswith("-")]
    return [f"unknown option {option}" for option in options if option not in known]


def command_lines(text: str) -> Iterator[list[str]]:
    """The words of every line of a shell block that runs `engram-memory` (continuations
    joined, comments dropped)."""
    for line in text.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue  # a heredoc body or prose, not a command
        if words and PROGRAM.match(words[0]):
            yield words[1:]


def client_entries(document: Any) -> Iterator[dict[str, Any]]:
    if isinstance(document, dict):
        for key in CLIENT_MAPS:
            servers = document.get(key)
            if isinstance(servers, dict):
                yield from (entry for entry in servers.values() if isinstance(entry, dict))


def _check_entry(where: str, entry: dict[str, Any]) -> None:
    if "command" in entry:
        assert PROGRAM.match(Path(entry["command"]).name), f"{where}: {entry['command']}"
        args = entry.get("args", [])
        assert command_problems(args) == [], where
        # Placeholders are paths, so the whole argument list must parse as the CLI would.
        build_parser(args[0]).parse_args(args)
    else:
        assert re.fullmatch(r"https?://\S+", entry["url"]), where


def test_every_json_block_parses_and_its_client_entries_start_real_commands() -> None:
    entries = 0
    for where, text in blocks("json"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            pytest.fail(f"{where}: not JSON: {exc}")
        for entry in client_entries(document):
            _check_entry(where, entry)
            entries += 1
    assert entries >= 7  # README's entry and every client of docs/operators/clients.md


def test_every_toml_block_parses_and_its_client_entries_start_real_commands() -> None:
    for where, text in blocks("toml"):
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            pytest.fail(f"{where}: not TOML: {exc}")
        for entry in client_entries(document):
            _check_entry(where, entry)


def test_every_documented_engram_memory_command_line_names_real_commands_and_options() -> None:
    checked = 0
    for where, text in [*blocks("bash"), *blocks("sh")]:
        for argv in command_lines(text):
            assert command_problems(argv) == [], f"{where}: engram-memory {' '.join(argv)}"
            checked += 1
    assert checked >= 40


@pytest.mark.parametrize(
    "line",
    [
        "engram-memory serv --transport stdio",  # no such command
        "engram-memory policy grnt --tenant acme",  # no such subcommand
        "engram-memory policy grant --tennant acme",  # no such option
        "engram-memory audit",  # a subcommand is required
    ],
)
def test_the_check_refuses_a_command_line_that_does_not_exist(line: str) -> None:
    (argv,) = command_lines(line)
    assert command_problems(argv) != []
