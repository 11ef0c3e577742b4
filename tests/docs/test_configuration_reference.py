"""docs/reference/configuration.md against the code: every ENGRAM_* variable the package reads
is documented there, nothing documented there is unknown to the code, and every `serve` flag
the table names is one `engram-memory serve` accepts."""

from __future__ import annotations

import re
from pathlib import Path

from engram_memory.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/reference/configuration.md"
VARIABLE = re.compile(r"ENGRAM_[A-Z0-9_]*[A-Z0-9]")


def _code_variables() -> set[str]:
    found: set[str] = set()
    for module in (ROOT / "service/engram_memory").rglob("*.py"):
        found |= set(VARIABLE.findall(module.read_text(encoding="utf-8")))
    return found


def _serve_options() -> set[str]:
    parser = build_parser("serve")
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict) and "serve" in choices:
            return set(choices["serve"]._option_string_actions)
    raise AssertionError("no serve parser")


def test_every_variable_the_code_reads_is_documented_and_no_other() -> None:
    documented = set(VARIABLE.findall(PAGE.read_text(encoding="utf-8")))
    code = _code_variables()
    assert len(code) > 30
    assert code - documented == set(), "document these in docs/reference/configuration.md"
    assert documented - code == set(), "documented but read nowhere"


def test_every_flag_of_the_serve_table_exists() -> None:
    table = PAGE.read_text(encoding="utf-8").split("## Other variables")[0]
    rows = [line for line in table.splitlines() if line.startswith("| `ENGRAM_")]
    flags = {flag for row in rows for flag in re.findall(r"`(--[a-z0-9-]+)`", row.split("|")[2])}
    assert len(flags) > 25
    assert flags - _serve_options() == set()
