"""Usage errors that name what was typed wrong.

argparse reports the first rule it trips over, which is often not the mistake: after an
unknown `--conifg`, the file name that follows is read as a subcommand ("invalid choice:
'x.yaml'"); an unknown option before any command reads as "arguments are required: command".
So whenever the command line holds an option that no parser of the chosen command knows, that
option is the error reported, with the nearest known spelling; otherwise argparse's own.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from engram_memory.contract.exceptions import CommandLineRefused

EXIT_USAGE = 2


class NamingParser(argparse.ArgumentParser):
    """An ArgumentParser whose refusals reach `report` (subparsers inherit the class)."""

    def error(self, message: str) -> NoReturn:
        raise CommandLineRefused(self, message)


def known_options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of `parser` and of the subcommand parsers built under it."""
    known: set[str] = set()
    for action in parser._actions:
        known.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                known |= known_options(child)
    return known


def unknown_options(argv: Sequence[str], known: set[str]) -> list[str]:
    """The option words of `argv` (`--name` or `--name=value`, `-x`) not in `known`."""
    unknown = []
    for word in argv:
        if word == "--":
            break
        if not word.startswith("-") or word == "-" or word[1:2].isdigit():
            continue
        name = word.split("=", 1)[0]
        if name not in known:
            unknown.append(name)
    return unknown


def report(
    error: CommandLineRefused, argv: Sequence[str], root: argparse.ArgumentParser
) -> NoReturn:
    """Print the refusing command's usage and the error, naming an unknown option; exit 2."""
    parser = error.parser
    assert isinstance(parser, argparse.ArgumentParser)
    known = known_options(root)
    unknown = unknown_options(argv, known)
    if unknown:
        flag = unknown[0]
        close = difflib.get_close_matches(flag, sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        message = f"unknown option {flag}{hint}; `{parser.prog} --help` lists the options"
    else:
        message = error.message + _file_for_config(error.message, parser)
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def _file_for_config(message: str, parser: argparse.ArgumentParser) -> str:
    """`gateway desktop.yaml`: a file name where a subcommand was expected is a forgotten
    `--config`, when the command has one."""
    chosen = re.search(r"invalid choice: '([^']+)'", message)
    if chosen is None or "--config" not in known_options(parser):
        return ""
    value = chosen[1]
    if not value.endswith((".yaml", ".yml", ".json")):
        return ""
    return f"; did you mean --config {value}?"
