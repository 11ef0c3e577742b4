"""`tests/cli_runner.run_cli` behaves like a `python -m engram_memory.cli` process: exit code,
stdout, stderr (log lines included) captured, and the environment, umask, streams and root
logger of this process put back whatever the command did.

The probe command below is registered into `cli.main.COMMANDS` for one test at a time: this
module offers `add_parser` and `run` as every command module does.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

import pytest

from engram_memory.cli import main as cli_main
from tests.cli_runner import run_cli

_PROBE = "probe"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(_PROBE)
    parser.add_argument("--code", type=int, default=0)
    parser.add_argument("--umask", type=lambda text: int(text, 8), default=None)
    parser.add_argument("--fail", action="store_true")
    return parser


def run(args: argparse.Namespace) -> int:
    # What the command saw: its environment, on stdout; a warning through logging.
    print(f"marker={os.environ.get('PROBE_MARKER', '-')} path={'PATH' in os.environ}")
    logging.getLogger("engram_memory.probe").warning("probe-warning")
    if args.umask is not None:
        os.umask(args.umask)  # left changed, as a command that forgot to restore it would
    if args.fail:
        os.environ["PROBE_LEAK"] = "1"
        raise RuntimeError("probe failure")
    return int(args.code)


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli_main.COMMANDS, _PROBE, (__name__, "test probe"))


@pytest.mark.usefixtures("probe")
def test_exit_code_and_stdout_are_the_commands() -> None:
    done = run_cli({"PROBE_MARKER": "m1"}, _PROBE, "--code", "5")
    assert done.returncode == 5
    assert done.stdout.split() == ["marker=m1", "path=False"]
    assert done.args == [_PROBE, "--code", "5"]


@pytest.mark.usefixtures("probe")
def test_log_lines_land_in_each_calls_own_stderr() -> None:
    first = run_cli({}, _PROBE)
    second = run_cli({}, _PROBE)
    # Not only the first call's stream: basicConfig binds a handler once per process.
    for done in (first, second):
        assert done.stderr.count("probe-warning") == 1
        assert "WARNING engram_memory.probe" in done.stderr
        assert "probe-warning" not in done.stdout


@pytest.mark.usefixtures("probe")
def test_environment_streams_and_logging_are_restored() -> None:
    environment = dict(os.environ)
    streams = (sys.stdin, sys.stdout, sys.stderr)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    assert run_cli({"PROBE_MARKER": "m2"}, _PROBE).returncode == 0
    with pytest.raises(RuntimeError):
        run_cli({"PROBE_MARKER": "m3"}, _PROBE, "--fail")
    assert dict(os.environ) == environment
    assert (sys.stdin, sys.stdout, sys.stderr) == streams
    assert (root.handlers, root.level) == (handlers, level)


@pytest.mark.usefixtures("probe")
def test_umask_is_restored_even_when_the_command_leaves_it_changed() -> None:
    before = os.umask(0o022)
    os.umask(before)
    assert run_cli({}, _PROBE, "--umask", "0777").returncode == 0
    after = os.umask(before)
    assert after == before


def test_umask_is_restored_after_a_private_command() -> None:
    before = os.umask(0o022)
    os.umask(before)
    # `admin` runs under umask 077 and, with no host keys configured, exits 2 (configuration).
    argv = ("admin", "--tenant", "acme", "--workspace", "w", "--operator", "op", "history", "r")
    done = run_cli({}, *argv)
    assert done.returncode == 2
    after = os.umask(before)
    assert after == before


def test_argparse_usage_error_is_returncode_2() -> None:
    done = run_cli({}, "no-such-command")
    assert done.returncode == 2
    assert done.stderr.startswith("usage:")
    assert done.stdout == ""
    help_shown = run_cli({}, "--help")
    assert help_shown.returncode == 0
    assert "usage:" in help_shown.stdout
