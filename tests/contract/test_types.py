"""Field types of SPEC §3: instants, byte-bounded strings, safe integers, ids and digests."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from engram_memory.contract.types import (
    Digest,
    IdempotencyKey,
    Instant,
    RecordId,
    Ref,
    SafeInt,
    format_instant,
    parse_instant,
)

MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999Z
MIN_MS = -62135596800000  # 0001-01-01T00:00:00.000Z


def _accepts(annotation: Any, value: object) -> bool:
    try:
        TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return False
    return True


def test_parse_instant_gives_epoch_milliseconds() -> None:
    assert parse_instant("1970-01-01T00:00:00.000Z") == 0
    assert parse_instant("2025-08-16T13:14:56.789Z") == 1755350096789
    assert parse_instant("9999-12-31T23:59:59.999Z") == MAX_MS
    assert parse_instant("0001-01-01T00:00:00.000Z") == MIN_MS


@pytest.mark.parametrize(
    "text",
    [
        "2026-02-30T00:00:00.000Z",  # no such day
        "2025-02-29T00:00:00.000Z",  # not a leap year
        "2026-13-01T00:00:00.000Z",
        "2026-01-01T24:00:00.000Z",
        "2026-01-01T23:60:00.000Z",
        "2026-01-01T23:59:60.000Z",  # leap seconds do not round-trip
        "0000-01-01T00:00:00.000Z",  # year 0000 (project decision)
        "2026-01-01T00:00:00Z",  # milliseconds are required
        "2026-01-01T00:00:00.000+00:00",
        "2026-01-01 00:00:00.000Z",
        "2026-01-01T00:00:00.000z",
        "2026-01-01T00:00:00.000Z\n",
        "٢٠٢٦-01-01T00:00:00.000Z",  # non-ASCII digits
    ],
)
def test_instant_that_does_not_round_trip_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r".+"):
        parse_instant(text)
    assert not _accepts(Instant, text)


def test_leap_day_of_a_leap_year_is_an_instant() -> None:
    assert _accepts(Instant, "2024-02-29T23:59:59.999Z")


@given(st.integers(min_value=MIN_MS, max_value=MAX_MS))
def test_every_instant_in_range_round_trips(millis: int) -> None:
    text = format_instant(millis)
    assert parse_instant(text) == millis
    assert format_instant(parse_instant(text)) == text


def test_format_instant_refuses_years_beyond_9999() -> None:
    with pytest.raises(ValueError, match=r".+"):
        format_instant(MAX_MS + 1)


def test_instant_must_be_a_string() -> None:
    assert not _accepts(Instant, 0)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (0, True),
        (-1, True),
        (2**53 - 1, True),
        (-(2**53 - 1), True),
        (2**53, False),
        (-(2**53), False),
        (True, False),
        (False, False),
        (1.5, False),
        ("1", False),
    ],
)
def test_safe_integer_bounds_and_strictness(value: object, ok: bool) -> None:
    assert _accepts(SafeInt, value) is ok


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("mem_abc234", True),
        ("mem_" + "a" * 508, True),
        ("mem_" + "a" * 509, False),  # 513 bytes
        ("mem_", False),
        ("mem_ABC", False),
        ("mem_abc1", False),  # base32 has no 1
        ("mem_abc\n", False),
        ("candidate_abc", False),
        (" mem_abc", False),
    ],
)
def test_record_id_shape(value: str, ok: bool) -> None:
    assert _accepts(RecordId, value) is ok


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("sha256:" + "0" * 64, True),
        ("sha256:" + "0" * 63, False),
        ("sha256:" + "A" * 64, False),
        ("SHA256:" + "0" * 64, False),
        ("sha256:" + "0" * 64 + "\n", False),
        ("sha512:" + "0" * 64, False),
    ],
)
def test_digest_shape(value: str, ok: bool) -> None:
    assert _accepts(Digest, value) is ok


def test_strings_are_not_coerced_from_numbers() -> None:
    assert not _accepts(Ref, 5)
    assert not _accepts(Ref, b"ref")


def test_idempotency_key_counts_utf8_bytes() -> None:
    assert _accepts(IdempotencyKey, "k" * 16)
    assert not _accepts(IdempotencyKey, "k" * 15)
    assert _accepts(IdempotencyKey, "é" * 8)  # 8 characters, 16 bytes
    assert not _accepts(IdempotencyKey, "k" * 257)
    assert _accepts(IdempotencyKey, "k" * 256)
