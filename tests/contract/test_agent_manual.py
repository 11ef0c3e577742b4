"""The agent's manual names an action for every SPEC §5 code, and says the same in both
languages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engram_memory.contract.agent_manual import ACTIONS, LANGUAGES, SECTIONS, instructions
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.types import ToolName

SPEC = Path(__file__).resolve().parents[3] / "shared" / "SPEC.md"


def _spec_codes() -> set[str]:
    table = SPEC.read_text(encoding="utf-8").split("## 5. Error codes")[1].split("## 6.")[0]
    return set(re.findall(r"^\| `([A-Za-z_]+)` \|", table, re.MULTILINE))


def test_every_spec_error_code_has_an_action_in_every_language() -> None:
    assert {code.name for code in ACTIONS} == _spec_codes() == {c.name for c in ErrorCode}
    for language in LANGUAGES:
        text = instructions(language)
        for code in ErrorCode:
            (line,) = [ln for ln in text.splitlines() if ln.startswith(f"- {code.name}: ")]
            assert len(line) > len(f"- {code.name}: ") + 10


def test_both_languages_say_the_same_things_in_the_same_order() -> None:
    english, french = (instructions(language).splitlines() for language in LANGUAGES)
    assert len(english) == len(french)
    for en, fr in zip(english, french, strict=True):
        # The same codes and tool names, in the same place.
        names = r"\b(engram_memory_\w+|[A-Z][A-Z_]{3,}|gate_failed|idempotency_key)\b"
        assert re.findall(names, en) == re.findall(names, fr)
    assert all(en and fr for en, fr in SECTIONS)


def test_the_manual_names_every_tool_and_the_admission_and_idempotency_rules() -> None:
    text = instructions()
    for tool in ToolName:
        assert tool.value in text
    assert "idempotency_key" in text
    assert "request admission" in text


def test_an_unknown_language_is_refused() -> None:
    with pytest.raises(ValueError, match="language"):
        instructions("de")
