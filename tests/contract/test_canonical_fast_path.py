"""The fast canonical encoder yields exactly the RFC 8785 bytes for every JSON value."""

from __future__ import annotations

from typing import Any

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from engram_memory.contract.canonical import SAFE_INTEGER_MAX, canonical_json

_SCALARS = (
    st.text()
    | st.booleans()
    | st.integers(min_value=-SAFE_INTEGER_MAX, max_value=SAFE_INTEGER_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_canonical_json_is_byte_identical_to_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_keys_beyond_the_basic_plane_sort_by_utf16_code_units_as_rfc8785_does() -> None:
    # U+1F600 is a surrogate pair (D83D DE00) in UTF-16, so it sorts before U+E000.
    value = {"\U0001f600": 1, "\ue000": 2, "a": 3}
    assert canonical_json(value) == rfc8785.dumps(value)
    assert canonical_json(value).index("\U0001f600".encode()) < canonical_json(value).index(
        "\ue000".encode()
    )


def test_control_characters_and_quotes_escape_as_rfc8785_does() -> None:
    value = {"text": '\x00\x08\t\n\x0b\x0c\r\x1f"\\\u2028\x7f'}
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False) | st.floats(min_value=1e-5, max_value=2.0))
def test_floats_in_and_around_the_plain_decimal_range_encode_as_rfc8785_does(value: float) -> None:
    assert canonical_json({"score": value, "list": [value]}) == rfc8785.dumps(
        {"score": value, "list": [value]}
    )
