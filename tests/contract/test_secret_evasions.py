"""The never-store detector sees through Unicode disguises (issue 9 item 8) and stays linear.

Matching runs on a folded copy (NFKC-style compatibility folding, format characters and
combining marks removed, confusable spaces folded); what is stored stays the NFC input.
"""

from __future__ import annotations

import time
import unicodedata

import pytest

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.parsing import ToolName, parse_arguments
from engram_memory.contract.secret_folding import fold_for_detection
from engram_memory.contract.secrets import DEFAULT_DETECTOR, SecretDetector
from tests.contract.examples import valid_capture_arguments
from tests.contract.secret_evasions import (
    ACUTE,
    EVASIONS,
    LEGITIMATE,
    ZWJ,
    ZWSP,
    full_width,
    interleave,
)

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = pytest.mark.xdist_group("timing")

MAX_STRING = 65_536


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _names(cases: list[tuple[str, str]]) -> list[str]:
    return [name for name, _ in cases]


@pytest.mark.parametrize("text", [t for _, t in EVASIONS], ids=_names(EVASIONS))
def test_a_disguised_secret_is_detected(text: str) -> None:
    assert DEFAULT_DETECTOR.contains_secret(_nfc(text))
    assert DEFAULT_DETECTOR.contains_secret(f"Context before.\n{_nfc(text)}\nAnd after.")


@pytest.mark.parametrize("text", [t for _, t in EVASIONS], ids=_names(EVASIONS))
def test_a_capture_holding_a_disguised_secret_is_invalid_schema(text: str) -> None:
    with pytest.raises(ToolError) as caught:
        parse_arguments(ToolName.CAPTURE, valid_capture_arguments(text=text))
    assert caught.value.code is ErrorCode.INVALID_SCHEMA


@pytest.mark.parametrize("text", [t for _, t in LEGITIMATE], ids=_names(LEGITIMATE))
def test_legitimate_multilingual_text_is_accepted_and_kept_as_received(text: str) -> None:
    assert not DEFAULT_DETECTOR.contains_secret(_nfc(text))
    parsed = parse_arguments(ToolName.CAPTURE, valid_capture_arguments(text=text))
    # The detector only decides: joiners, marks and full-width forms are stored as sent (NFC).
    assert parsed.arguments["payload"]["components"][0]["text"] == _nfc(text)  # type: ignore[index, call-overload]


def test_folding_removes_format_characters_and_marks_and_decomposes_compatibility_forms() -> None:
    assert fold_for_detection(f"pa{ZWJ}ss{ZWSP}wo{ACUTE}rd") == "password"
    assert fold_for_detection(full_width("ghp_A1")) == "ghp_A1"
    assert fold_for_detection("a\u3000b\u2028c\u2212d") == "a b\nc-d"
    assert fold_for_detection("plain ascii\r\nline") == "plain ascii\n\nline"


def test_a_policy_pattern_written_for_accented_text_still_matches_the_text_as_stored() -> None:
    detector = SecretDetector(extra_patterns=[r"Schlüssel=\S+"])
    assert detector.contains_secret("Schlüssel=abc")
    assert not detector.contains_secret("Schlüsselbund")


# Worst cases for the folding itself and for the shapes behind it, each a 64 KiB string:
# alternating combining marks (canonical reordering is an insertion sort, quadratic if the
# marks were decomposed before being removed), the longest compatibility expansion (U+FDFA,
# 18 code points), and hint-laden text whose disguises are only visible after folding.
WORST_CASES = [
    "\u0301\u0316" * (MAX_STRING // 2),
    "\u0316" * (MAX_STRING // 2) + "\u0301" * (MAX_STRING // 2),
    "a" + "\u0301\u0316" * (MAX_STRING // 2 - 1),
    "\ufdfa" * MAX_STRING,
    f"p{ZWJ}assword=" * (MAX_STRING // 11),
    full_width("eyJ-") * (MAX_STRING // 4),
    full_width("sk-") * (MAX_STRING // 3),
    interleave("://a:" * (MAX_STRING // 10), ZWSP),
    full_width("authorization: ") + "a\u00ad-" * (MAX_STRING // 3 - 6),
    ("ghp_" + ZWSP) * (MAX_STRING // 5),
    full_width("-----BEGIN ") * (MAX_STRING // 11),
    "\u2474" * MAX_STRING,  # PARENTHESIZED DIGIT ONE: expands to "(1)"
]


@pytest.mark.parametrize("text", WORST_CASES, ids=[f"case{i}" for i in range(len(WORST_CASES))])
def test_a_worst_case_64_kib_string_is_folded_and_scanned_in_bounded_work(text: str) -> None:
    assert len(text) <= MAX_STRING
    DEFAULT_DETECTOR.contains_secret("é")  # the tables are built at the first scan, not timed
    started = time.perf_counter()
    folded = fold_for_detection(text)
    DEFAULT_DETECTOR.contains_secret(text)
    elapsed = time.perf_counter() - started
    # Folding never grows a string beyond the longest compatibility decomposition (18).
    assert len(folded) <= 18 * len(text)
    # Generous bound: linear work is a few tens of milliseconds here; a quadratic pass over
    # 64 KiB (about 2 * 10^9 steps) takes many seconds.
    assert elapsed < 2.0
