"""`normalize`'s direct path for exact str/dict/list decides exactly as the isinstance chain
it replaced (kept here as the reference): same tree, or the same refusal."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engram_memory.contract.canonical import SAFE_INTEGER_MAX, nfc, normalize
from engram_memory.contract.exceptions import NonCanonicalValue


def _reference(value: object) -> Any:
    """The normalize of before issue 20, verbatim in behaviour."""
    if isinstance(value, str):
        return nfc(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > SAFE_INTEGER_MAX:
            raise NonCanonicalValue("unsafe integer")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NonCanonicalValue("non-finite number")
        if value == 0.0 and math.copysign(1.0, value) < 0:
            raise NonCanonicalValue("negative zero")
        if value.is_integer():
            if abs(value) > SAFE_INTEGER_MAX:
                raise NonCanonicalValue("unsafe integer")
            return int(value)
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NonCanonicalValue("non-string key")
            nkey = nfc(key)
            if nkey in out:
                raise NonCanonicalValue("duplicate key after NFC")
            out[nkey] = _reference(item)
        return out
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [_reference(item) for item in value]
    if value is None:
        raise NonCanonicalValue("null")
    raise NonCanonicalValue("not a JSON value")


class Colour(StrEnum):
    RED = "red"


def _outcome(function: Any, value: object) -> tuple[str, Any]:
    try:
        return "ok", function(value)
    except NonCanonicalValue as exc:
        return "refused", str(exc.detail if hasattr(exc, "detail") else exc)


# Decomposed and composed forms, so keys collide after NFC; a lone surrogate; big numbers.
_FORMS = ["a", "é", unicodedata.normalize("NFD", "é"), "\ud800", "Ω", "x"]
_TEXT = st.sampled_from(_FORMS) | st.text(max_size=4)
_SCALARS = (
    _TEXT
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats()
    | st.none()
    | st.just(Colour.RED)
    | st.binary(max_size=2)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(_TEXT | st.integers(0, 2) | st.just(Colour.RED), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=600, deadline=None)
@given(_VALUES)
def test_normalize_decides_exactly_as_the_reference(value: object) -> None:
    assert _outcome(normalize, value) == _outcome(_reference, value)


def test_the_direct_path_still_refuses_keys_that_collide_after_nfc() -> None:
    value = {"é": 1, unicodedata.normalize("NFD", "é"): 2}
    assert _outcome(normalize, value)[0] == "refused"
