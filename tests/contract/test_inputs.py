"""Tool input contracts of SPEC §1.2, §3 and §4: closed objects, bounds, cross-references."""

from __future__ import annotations

import copy
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.inputs import CaptureInput, SearchInput, check_capture_time_rules
from engram_memory.contract.parsing import ToolName, parse_arguments
from engram_memory.contract.types import parse_instant
from tests.contract.examples import (
    INSTANT,
    VALID_ARGUMENTS,
    full_capture_arguments,
    valid_capture_arguments,
    valid_forget_arguments,
    valid_get_arguments,
    valid_request_admission_arguments,
    valid_search_arguments,
    valid_withdraw_arguments,
)

CAPTURE = ToolName.CAPTURE
BAD = "INVALID_SCHEMA"


def code_of(tool: str, arguments: object) -> str:
    try:
        parse_arguments(ToolName(tool), arguments)
    except ToolError as error:
        return error.code.name
    return "OK"


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*path, index))


def _at(tree: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        tree = tree[step]
    return tree


def _set(tree: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(tree)
    _at(out, path[:-1])[path[-1]] = value
    return out


ALL_VALID = [(tool, build) for tool, build in VALID_ARGUMENTS.items()] + [
    ("engram_memory_capture", full_capture_arguments),
    (
        "engram_memory_search",
        lambda: valid_search_arguments(
            limit=50,
            max_packet_bytes=4096,
            capability_policy={"minimum_channels": "lexical_and_semantic", "network": "allow"},
            page_cursor="opaque-cursor",
        ),
    ),
    ("engram_memory_get", lambda: valid_get_arguments(max_packet_bytes=1_048_576)),
]


@pytest.mark.parametrize(("tool", "build"), ALL_VALID)
def test_valid_example_arguments_pass_the_contract(
    tool: str, build: Callable[[], dict[str, Any]]
) -> None:
    assert code_of(tool, build()) == "OK"


@pytest.mark.parametrize(("tool", "build"), ALL_VALID)
def test_null_anywhere_is_invalid_schema(tool: str, build: Callable[[], dict[str, Any]]) -> None:
    arguments = build()
    for path, _ in _paths(arguments):
        if path:
            assert code_of(tool, _set(arguments, path, None)) == "INVALID_SCHEMA", path


@pytest.mark.parametrize(("tool", "build"), ALL_VALID)
def test_an_extra_property_at_any_depth_is_invalid_schema(
    tool: str, build: Callable[[], dict[str, Any]]
) -> None:
    arguments = build()
    objects = [path for path, node in _paths(arguments) if isinstance(node, dict)]
    assert objects
    for path in objects:
        mutated = copy.deepcopy(arguments)
        _at(mutated, path)["unexpected"] = "x"
        assert code_of(tool, mutated) == "INVALID_SCHEMA", path


@pytest.mark.parametrize(("tool", "build"), ALL_VALID)
def test_each_required_field_is_required(tool: str, build: Callable[[], dict[str, Any]]) -> None:
    arguments = build()
    for key in arguments:
        mutated = {k: v for k, v in arguments.items() if k != key}
        expected = "OK" if key in _OPTIONAL_TOP else "INVALID_SCHEMA"
        assert code_of(tool, mutated) == expected, key


_OPTIONAL_TOP = {"limit", "max_packet_bytes", "capability_policy", "page_cursor"}


@pytest.mark.parametrize(
    "field",
    [
        "scope_ref",
        "derivation",
        "record_id",
        "payload_digest",
        "record_digest",
        "recorded_at",
        "recorded_cursor",
        "authorization_receipt_digest",
        "trust",
    ],
)
def test_capture_refuses_scope_derivation_and_writer_fields(field: str) -> None:
    arguments = valid_capture_arguments()
    arguments["payload"][field] = "sha256:" + "a" * 64
    assert code_of(CAPTURE, arguments) == "INVALID_SCHEMA"


@pytest.mark.parametrize(
    "field", ["tenantId", "scope_ref", "principal", "agent_id", "auditId", "confirmed"]
)
def test_host_owned_context_in_arguments_is_an_unknown_property(field: str) -> None:
    for tool, build in VALID_ARGUMENTS.items():
        assert code_of(tool, {**build(), field: True}) == "INVALID_SCHEMA"


def test_arguments_must_be_an_object() -> None:
    raw: object
    for raw in ([], "x", 1, None):
        assert code_of("engram_memory_get", raw) == "INVALID_SCHEMA"


# --- bounds ----------------------------------------------------------------------------------

SEARCH = ToolName.SEARCH
ADMIT = ToolName.REQUEST_ADMISSION
WITHDRAW = ToolName.WITHDRAW
FORGET = ToolName.FORGET
CITATION = ("payload", "citations", 0)
FULL = full_capture_arguments
SIMPLE = valid_capture_arguments


def _search_with_cursor() -> dict[str, Any]:
    return valid_search_arguments(page_cursor="c")


# (tool, builder, path, min bytes, max bytes)
STRING_BOUNDS: list[tuple[str, Callable[[], dict[str, Any]], tuple[Any, ...], int, int]] = [
    (SEARCH, valid_search_arguments, ("query",), 1, 8192),
    (SEARCH, valid_search_arguments, ("purpose_ref",), 1, 512),
    (SEARCH, _search_with_cursor, ("page_cursor",), 1, 512),
    (ADMIT, valid_request_admission_arguments, ("candidate_id",), 1, 512),
    (ADMIT, valid_request_admission_arguments, ("idempotency_key",), 16, 256),
    (WITHDRAW, valid_withdraw_arguments, ("reason_ref",), 1, 512),
    (FORGET, valid_forget_arguments, ("reason_ref",), 1, 512),
    (CAPTURE, SIMPLE, ("idempotency_key",), 16, 256),
    (CAPTURE, SIMPLE, ("payload", "purpose_ref"), 1, 512),
    (CAPTURE, SIMPLE, ("payload", "components", 0, "text"), 1, 65536),
    (CAPTURE, SIMPLE, (*CITATION, "source_ref"), 1, 512),
    (CAPTURE, SIMPLE, (*CITATION, "locator", "scheme"), 1, 512),
    (CAPTURE, SIMPLE, (*CITATION, "locator", "value"), 1, 512),
    (CAPTURE, SIMPLE, ("payload", "primary_event", "type_ref"), 1, 512),
    (CAPTURE, SIMPLE, ("evidence", "evidence_ref"), 1, 512),
    (CAPTURE, FULL, ("evidence", "attestation"), 1, 4096),
    (CAPTURE, FULL, ("payload", "reconciliation", "family_refs", 1), 1, 512),
]


def _bound_cases() -> Iterator[Any]:
    for tool, build, path, low, high in STRING_BOUNDS:
        yield pytest.param(
            tool, build, path, low, high, id=f"{tool[14:]}:{'.'.join(map(str, path))}"
        )


@pytest.mark.parametrize(("tool", "build", "path", "low", "high"), list(_bound_cases()))
def test_string_byte_bounds_are_exact(
    tool: str, build: Callable[[], dict[str, Any]], path: tuple[Any, ...], low: int, high: int
) -> None:
    arguments = build()
    assert code_of(tool, _set(arguments, path, "k" * high)) == "OK"
    assert code_of(tool, _set(arguments, path, "k" * (high + 1))) == "INVALID_SCHEMA"
    assert code_of(tool, _set(arguments, path, "k" * low)) == "OK"
    assert code_of(tool, _set(arguments, path, "k" * (low - 1))) == "INVALID_SCHEMA"
    # Bytes, not characters: "é" is two UTF-8 bytes.
    assert code_of(tool, _set(arguments, path, "é" * (high // 2))) == "OK"
    assert code_of(tool, _set(arguments, path, "é" * (high // 2) + "k")) == "INVALID_SCHEMA"
    # Bounds apply to the NFC form: "e" + combining acute (3 bytes) becomes "é" (2 bytes).
    decomposed = "e\u0301" * (high // 2)
    assert len(decomposed.encode()) > high
    assert code_of(tool, _set(arguments, path, decomposed)) == "OK"


def test_idempotency_key_of_15_bytes_is_refused() -> None:
    assert code_of(CAPTURE, valid_capture_arguments(idempotency_key="k" * 15)) == "INVALID_SCHEMA"


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=600))
def test_a_ref_is_accepted_iff_its_nfc_form_is_1_to_512_bytes(text: str) -> None:
    size = len(unicodedata.normalize("NFC", text).encode("utf-8"))
    expected = "OK" if 1 <= size <= 512 else "INVALID_SCHEMA"
    assert (
        code_of("engram_memory_request_admission", valid_request_admission_arguments(text))
        == expected
    )


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"limit": 1}, "OK"),
        ({"limit": 50}, "OK"),
        ({"limit": 0}, "INVALID_SCHEMA"),
        ({"limit": 51}, "INVALID_SCHEMA"),
        ({"limit": 10.0}, "OK"),  # integral float is the integer 10
        ({"limit": 10.5}, "INVALID_SCHEMA"),
        ({"limit": True}, "INVALID_SCHEMA"),
        ({"limit": "10"}, "INVALID_SCHEMA"),
        ({"max_packet_bytes": 4096}, "OK"),
        ({"max_packet_bytes": 4095}, "INVALID_SCHEMA"),
        ({"max_packet_bytes": 1_048_577}, "INVALID_SCHEMA"),
        ({"capability_policy": {"minimum_channels": "lexical"}}, "INVALID_SCHEMA"),
        ({"capability_policy": {"network": "forbid"}}, "INVALID_SCHEMA"),
        ({"capability_policy": {"minimum_channels": "Lexical", "network": "forbid"}}, BAD),
        ({"capability_policy": {"minimum_channels": "lexical", "network": "deny"}}, BAD),
        ({"page_cursor": ""}, "INVALID_SCHEMA"),
    ],
)
def test_search_numeric_and_enumeration_bounds(overrides: dict[str, Any], expected: str) -> None:
    assert code_of("engram_memory_search", valid_search_arguments(**overrides)) == expected


@pytest.mark.parametrize("value", [2**53, -(2**53), True, 1.5, "1"])
def test_capture_times_must_be_safe_integers(value: object) -> None:
    for path in [("payload", "valid_time", "t"), ("payload", "primary_event", "at")]:
        assert code_of(CAPTURE, _set(valid_capture_arguments(), path, value)) == "INVALID_SCHEMA"


def test_integral_float_time_is_the_integer() -> None:
    arguments = valid_capture_arguments(valid_time={"t": 1e12})
    parsed = parse_arguments(CAPTURE, arguments)
    assert parsed.arguments["payload"]["valid_time"] == {"t": 1_000_000_000_000}


@pytest.mark.parametrize(
    ("valid_time", "expected"),
    [
        ({"t": 5}, "OK"),
        ({"t": 5, "t_end": 5}, "OK"),
        ({"t": 5, "t_end": 6}, "OK"),
        ({"t": 5, "t_end": 4}, "INVALID_SCHEMA"),
        ({"t_end": 5}, "INVALID_SCHEMA"),
    ],
)
def test_valid_time_end_is_not_before_start(valid_time: dict[str, int], expected: str) -> None:
    assert code_of(CAPTURE, valid_capture_arguments(valid_time=valid_time)) == expected


@pytest.mark.parametrize("value", ["2026-02-30T00:00:00.000Z", "0000-01-01T00:00:00.000Z"])
def test_capture_instants_must_round_trip(value: str) -> None:
    arguments = full_capture_arguments()
    for path in [
        ("payload", "citations", 0, "observed_at"),
        ("payload", "retention", "expires_at"),
    ]:
        assert code_of(CAPTURE, _set(arguments, path, value)) == "INVALID_SCHEMA"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("payload", "schema_version"), 1),
        (("payload", "schema_version"), "2"),
        (("payload", "components", 0, "kind"), "Decision"),
        (("payload", "retention"), {"derivative_rule": "keep"}),
        (("payload", "retention"), {"expires_at": INSTANT}),
        (("payload", "reconciliation"), {}),
        (("payload", "components"), []),
        (("payload", "citations"), []),
        (("payload", "components", 0, "citation_ids"), []),
        (("evidence", "citation_ids"), []),
    ],
)
def test_capture_shape_violations_are_invalid_schema(path: tuple[Any, ...], value: object) -> None:
    assert code_of(CAPTURE, _set(full_capture_arguments(), path, value)) == "INVALID_SCHEMA"


def test_capture_list_sizes_are_bounded() -> None:
    arguments = valid_capture_arguments()
    component = arguments["payload"]["components"][0]
    many = [component] + [{**component, "component_id": f"component:{i}"} for i in range(64)]
    assert code_of(CAPTURE, _set(arguments, ("payload", "components"), many)) == "INVALID_SCHEMA"
    assert code_of(CAPTURE, _set(arguments, ("payload", "components"), many[:64])) == "OK"
    refs = [f"family:{i:03d}" for i in range(65)]
    path = ("payload", "reconciliation")
    assert code_of(CAPTURE, _set(arguments, path, {"family_refs": refs})) == "INVALID_SCHEMA"
    assert code_of(CAPTURE, _set(arguments, path, {"family_refs": refs[:64]})) == "OK"
    assert code_of(CAPTURE, _set(arguments, path, {"family_refs": []})) == "OK"


# --- cross-references --------------------------------------------------------------------------


def _capture_with(mutate: Callable[[dict[str, Any]], None]) -> str:
    arguments = full_capture_arguments()
    mutate(arguments)
    return code_of(CAPTURE, arguments)


def test_duplicate_citation_ids_are_refused() -> None:
    def mutate(a: dict[str, Any]) -> None:
        a["payload"]["citations"][1]["citation_id"] = "citation:source"

    assert _capture_with(mutate) == "INVALID_SCHEMA"


def test_duplicate_component_ids_are_refused() -> None:
    def mutate(a: dict[str, Any]) -> None:
        a["payload"]["components"][1]["component_id"] = "component:decision"

    assert _capture_with(mutate) == "INVALID_SCHEMA"


def test_component_citation_must_resolve() -> None:
    def mutate(a: dict[str, Any]) -> None:
        a["payload"]["components"][1]["citation_ids"] = ["citation:source", "citation:missing"]

    assert _capture_with(mutate) == "INVALID_SCHEMA"


def test_primary_component_id_must_name_a_component() -> None:
    def mutate(a: dict[str, Any]) -> None:
        a["payload"]["primary_component_id"] = "component:missing"

    assert _capture_with(mutate) == "INVALID_SCHEMA"


def test_primary_event_citation_must_be_a_citation() -> None:
    def mutate(a: dict[str, Any]) -> None:
        a["payload"]["primary_event"]["citation_id"] = "citation:missing"

    assert _capture_with(mutate) == "INVALID_SCHEMA"


def test_primary_event_citation_must_be_cited_by_the_primary_component() -> None:
    def mutate(a: dict[str, Any]) -> None:
        # citation:ticket exists, but only the context component cites it.
        a["payload"]["primary_event"]["citation_id"] = "citation:ticket"

    assert _capture_with(mutate) == "INVALID_SCHEMA"


def test_evidence_citations_must_be_payload_citations() -> None:
    def mutate(a: dict[str, Any]) -> None:
        a["evidence"]["citation_ids"] = ["citation:source", "citation:missing"]

    assert _capture_with(mutate) == "INVALID_SCHEMA"


@pytest.mark.parametrize(
    "path", [("payload", "components", 0, "citation_ids"), ("evidence", "citation_ids")]
)
def test_citation_id_lists_must_be_distinct(path: tuple[Any, ...]) -> None:
    duplicated = ["citation:source", "citation:source"]
    assert code_of(CAPTURE, _set(full_capture_arguments(), path, duplicated)) == "INVALID_SCHEMA"


@pytest.mark.parametrize(
    ("family_refs", "expected"),
    [
        (["a", "b"], "OK"),
        (["b", "a"], "INVALID_SCHEMA"),
        (["a", "a"], "INVALID_SCHEMA"),
        (["B", "a"], "OK"),  # code units: "B" (0x42) < "a" (0x61)
        # U+FF21 (one unit 0xFF21) sorts after U+1F600 (surrogates 0xD83D…) in UTF-16,
        # the reverse of code-point order.
        (["\U0001f600", "\uff21"], "OK"),
        (["\uff21", "\U0001f600"], "INVALID_SCHEMA"),
    ],
)
def test_family_refs_are_strictly_ascending_by_utf16_code_units(
    family_refs: list[str], expected: str
) -> None:
    arguments = valid_capture_arguments(reconciliation={"family_refs": family_refs})
    assert code_of(CAPTURE, arguments) == expected


# --- capture time rules ------------------------------------------------------------------------


def test_expires_at_must_be_strictly_after_the_capture_instant() -> None:
    model = parse_arguments(CAPTURE, full_capture_arguments()).expect(CaptureInput)
    expires = parse_instant(INSTANT)
    check_capture_time_rules(model, expires - 1)
    for now in (expires, expires + 1):
        with pytest.raises(ToolError) as caught:
            check_capture_time_rules(model, now)
        assert caught.value.code is ErrorCode.INVALID_SCHEMA


def test_capture_without_expiry_has_no_time_rule() -> None:
    model = parse_arguments(CAPTURE, valid_capture_arguments()).model
    check_capture_time_rules(model, 2**52)


def test_time_rules_refuse_other_inputs() -> None:
    model = parse_arguments(ToolName.SEARCH, valid_search_arguments()).model
    assert isinstance(model, SearchInput)
    with pytest.raises(TypeError):
        check_capture_time_rules(model, 0)
