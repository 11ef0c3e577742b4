"""NFC in linear time: an over-long run of combining marks out of canonical order is refused.

CPython sorts each run of combining marks by insertion while normalizing, so one 64 KiB run
out of order costs seconds (a 1 MiB one, minutes). Text already in NFC is kept as it is; text
that needs normalizing may hold at most 30 marks in a row (UAX #15, stream-safe format).
"""

from __future__ import annotations

import time
import unicodedata

import pytest

from engram_memory.contract.canonical import MAX_NONSTARTER_RUN, nfc
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import NonCanonicalValue, ToolError
from engram_memory.contract.parsing import ToolName, parse_arguments
from tests.contract.examples import valid_capture_arguments

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = pytest.mark.xdist_group("timing")

ACUTE, GRAVE_BELOW = "\u0301", "\u0316"  # combining classes 230 and 220: out of order


def test_a_64_kib_run_of_marks_out_of_order_is_refused_in_bounded_time() -> None:
    started = time.perf_counter()
    with pytest.raises(ToolError) as caught:
        parse_arguments(
            ToolName.CAPTURE, valid_capture_arguments(text=(ACUTE + GRAVE_BELOW) * 32_768)
        )
    assert caught.value.code is ErrorCode.INVALID_SCHEMA
    # Generous: the refusal is linear (milliseconds); normalizing would take seconds.
    assert time.perf_counter() - started < 2.0


def test_the_longest_allowed_run_out_of_order_is_normalized() -> None:
    text = "a" + (ACUTE + GRAVE_BELOW) * (MAX_NONSTARTER_RUN // 2)
    assert nfc(text) == unicodedata.normalize("NFC", text)


def test_one_mark_more_than_allowed_out_of_order_is_refused() -> None:
    with pytest.raises(NonCanonicalValue):
        nfc("a" + (ACUTE + GRAVE_BELOW) * (MAX_NONSTARTER_RUN // 2) + GRAVE_BELOW)


@pytest.mark.parametrize(
    "text",
    [
        "x" + ACUTE * 65_536,  # a long run already in canonical order
        GRAVE_BELOW * 1_000 + ACUTE * 1_000,
        "Zalgo: " + "z" + "\u0351\u0346\u0364" * 20,
    ],
)
def test_text_already_in_nfc_is_kept_whatever_its_runs(text: str) -> None:
    assert unicodedata.is_normalized("NFC", text)
    assert nfc(text) == text


def test_ordinary_decomposed_text_is_still_composed() -> None:
    assert nfc("Cafe\u0301 cre\u0300me, Ha\u0308nde") == "Café crème, Hände"
