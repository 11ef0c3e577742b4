"""The advertised input schemas say what validation enforces (issue 24, finding 6).

Boundary inputs are generated from SPEC's tables (spec_bounds.py): for every bound, values
just under, at and just over each end. Each input gets two verdicts: the advertised schema's
(jsonschema, Draft 2020-12, exactly what `tools/list` shows) and the server's (a real call
through the service: real DuckDB, real OPA Wasm, signed context and, where needed, a signed
confirmation). They must agree, and a refusal must carry the code SPEC gives it.

Where JSON Schema cannot follow SPEC, the gap is stated and tested as such: a string of
multi-byte characters over a byte bound passes `maxLength` (code points), so its description
states the byte bound; a well-shaped Instant that is not a real date passes `pattern`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import pytest

from engram_memory.contract.exceptions import ProtocolRefusal
from engram_memory.contract.schemas import TOOL_SPECS
from engram_memory.contract.types import ALWAYS_CONFIRMED_TOOLS, ToolName
from tests.contract import examples
from tests.contract.spec_bounds import Bound, read_spec_inputs
from tests.harness import Caller, fresh_key

SPEC_INPUTS = read_spec_inputs()
PURPOSE = examples.PURPOSE
Args = dict[str, Any]
Setter = Callable[[Args, Any], None]
# What a call that passes the contract may still answer (no target exists, no consent, no
# semantic channel configured).
NOT_SCHEMA = {"NOT_FOUND", "STALE_PAGE", "UNAUTHORIZED", "DIGEST_CONFLICT", "RANKING_UNAVAILABLE"}
SEARCH, GET, CAPTURE = ToolName.SEARCH, ToolName.GET, ToolName.CAPTURE
ADMIT, WITHDRAW, FORGET = ToolName.REQUEST_ADMISSION, ToolName.WITHDRAW, ToolName.FORGET


def _base(tool: ToolName) -> Args:
    args: Args = examples.VALID_ARGUMENTS[tool]()
    if tool == CAPTURE:
        args["idempotency_key"] = fresh_key("capture")
    return args


def _at(*path: str | int) -> Setter:
    def put(args: Args, value: Any) -> None:
        node = args
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return put


def _component_id(args: Args, value: str) -> None:
    args["payload"]["components"][0]["component_id"] = value
    args["payload"]["primary_component_id"] = value


def _citation_id(args: Args, value: str) -> None:
    payload = args["payload"]
    payload["citations"][0]["citation_id"] = value
    payload["components"][0]["citation_ids"] = [value]
    payload["primary_event"]["citation_id"] = value
    args["evidence"]["citation_ids"] = [value]


def _citations(args: Args, count: int, first: str = "citation:source") -> list[str]:
    template = args["payload"]["citations"][0]
    ids = [first] + [f"citation:{index:03d}" for index in range(1, count)]
    args["payload"]["citations"] = [{**template, "citation_id": ids[i]} for i in range(count)]
    return ids[:count]


def _component_citations(args: Args, count: int) -> None:
    ids = _citations(args, max(count, 1))
    args["payload"]["components"][0]["citation_ids"] = ids[:count]


def _evidence_citations(args: Args, count: int) -> None:
    ids = _citations(args, max(count, 1))
    args["evidence"]["citation_ids"] = ids[:count]


def _components(args: Args, count: int) -> None:
    template = args["payload"]["components"][0]
    ids = ["component:decision"] + [f"component:{index:03d}" for index in range(1, count)]
    args["payload"]["components"] = [{**template, "component_id": ids[i]} for i in range(count)]


def _family_refs(args: Args, count: int) -> None:
    args["payload"]["reconciliation"] = {"family_refs": [f"family:{i:03d}" for i in range(count)]}


def _valid_time(field: str) -> Setter:
    def put(args: Args, value: int) -> None:
        if field == "t":
            args["payload"]["valid_time"] = {"t": value}
        else:  # the earliest safe `t`, so only `t_end`'s own bound decides
            args["payload"]["valid_time"] = {"t": -(2**53 - 1), "t_end": value}

    return put


# Where each bound SPEC states lives in the arguments. Every name SPEC bounds is here, and
# nothing else (test_every_spec_bound_is_located keeps the two in step).
LOCATIONS: dict[str, list[tuple[ToolName, Setter]]] = {
    "query": [(SEARCH, _at("query"))],
    "purpose_ref": [
        (SEARCH, _at("purpose_ref")),
        (GET, _at("purpose_ref")),
        (CAPTURE, _at("payload", "purpose_ref")),
    ],
    "limit": [(SEARCH, _at("limit"))],
    "max_packet_bytes": [(SEARCH, _at("max_packet_bytes")), (GET, _at("max_packet_bytes"))],
    "page_cursor": [(SEARCH, _at("page_cursor"))],
    "record_id": [(GET, _at("record_id")), (FORGET, _at("record_id"))],
    "candidate_id": [(ADMIT, _at("candidate_id")), (WITHDRAW, _at("candidate_id"))],
    "idempotency_key": [
        (tool, _at("idempotency_key")) for tool in (CAPTURE, ADMIT, WITHDRAW, FORGET)
    ],
    "reason_ref": [(WITHDRAW, _at("reason_ref")), (FORGET, _at("reason_ref"))],
    "component_id": [(CAPTURE, _component_id)],
    "primary_component_id": [(CAPTURE, _component_id)],
    "citation_id": [(CAPTURE, _citation_id)],
    "source_ref": [(CAPTURE, _at("payload", "citations", 0, "source_ref"))],
    "locator.scheme": [(CAPTURE, _at("payload", "citations", 0, "locator", "scheme"))],
    "locator.value": [(CAPTURE, _at("payload", "citations", 0, "locator", "value"))],
    "type_ref": [(CAPTURE, _at("payload", "primary_event", "type_ref"))],
    "evidence_ref": [(CAPTURE, _at("evidence", "evidence_ref"))],
    "family_refs[]": [
        (
            CAPTURE,
            lambda args, value: _at("payload", "reconciliation")(args, {"family_refs": [value]}),
        )
    ],
    "text": [(CAPTURE, _at("payload", "components", 0, "text"))],
    "attestation": [(CAPTURE, _at("evidence", "attestation"))],
    "components": [(CAPTURE, _components)],
    "citations": [(CAPTURE, lambda args, count: _citations(args, count) and None)],
    "citation_ids": [(CAPTURE, _component_citations), (CAPTURE, _evidence_citations)],
    "family_refs": [(CAPTURE, _family_refs)],
    "t": [(CAPTURE, _valid_time("t"))],
    "t_end": [(CAPTURE, _valid_time("t_end"))],
    "at": [(CAPTURE, _at("payload", "primary_event", "at"))],
    "safe integer": [],  # the rule behind `t`, `t_end` and `at`, located through them
}


def _text(name: str, size: int) -> str:
    """`size` ASCII bytes that are otherwise valid for `name`."""
    if name == "record_id":
        return "mem_" + "a" * (size - 4)
    return ("abcdefghij" * (size // 10 + 1))[:size]


def _samples(bound: Bound) -> Iterator[Any]:
    """Just under, at and just over each end of `bound` (the low end only when SPEC has one)."""
    ends = [bound.high] if bound.low is None else [bound.low, bound.high]
    sizes = sorted({size for end in ends for size in (end - 1, end, end + 1) if size >= 0})
    for size in sizes:
        if bound.unit == "bytes":
            yield _text(bound.name, size)
        else:
            yield size
    if bound.unit == "bytes" and bound.low is not None and bound.low > 2:
        # Just under the minimum in two-byte characters: still refused by the schema.
        yield "é" * ((bound.low - 1) // 2) + "a" * ((bound.low - 1) % 2)


def _server_refusal(caller: Caller, tool: ToolName, args: Args) -> str | None:
    """The code the server refuses `args` with, or None when the contract let them pass."""
    confirmation = None
    if tool in ALWAYS_CONFIRMED_TOOLS:
        target = args.get("record_id", args.get("candidate_id"))
        confirmation = caller.confirm(tool, args, str(target))
    try:
        envelope = caller.call(tool, args, confirmation)
    except ProtocolRefusal as refusal:
        return f"-32603 {refusal.code.name}"
    if envelope["ok"]:
        return None
    code: str = envelope["error"]["code"]
    assert code in NOT_SCHEMA | {"INVALID_SCHEMA", "INVALID_DIGEST"}, code
    return code if code in {"INVALID_SCHEMA", "INVALID_DIGEST"} else None


def _verdicts(caller: Caller, tool: ToolName, args: Args) -> tuple[bool, str | None]:
    schema_accepts = jsonschema.Draft202012Validator(TOOL_SPECS[tool].input_schema).is_valid(args)
    return schema_accepts, _server_refusal(caller, tool, copy.deepcopy(args))


def _expected_refusal(name: str) -> str:
    # SPEC §1.4: `purpose_ref` must equal the bound purpose, checked before the schema; a
    # value of any other length cannot be the bound purpose, so it is a protocol refusal.
    return "-32603 CONTEXT_UNAVAILABLE" if name == "purpose_ref" else "INVALID_SCHEMA"


def test_every_spec_bound_is_located() -> None:
    assert set(SPEC_INPUTS.bounds) == set(LOCATIONS)


@pytest.mark.parametrize(
    ("name", "tool", "index"),
    [
        (name, tool, index)
        for name, places in LOCATIONS.items()
        for index, (tool, _) in enumerate(places)
    ],
)
def test_schema_and_server_agree_at_every_bound(
    alice: Caller, name: str, tool: ToolName, index: int
) -> None:
    caller = alice.as_(purpose_ref=PURPOSE)
    setter = LOCATIONS[name][index][1]
    for value in _samples(SPEC_INPUTS.bounds[name]):
        args = _base(tool)
        setter(args, value)
        if name == "purpose_ref" and isinstance(value, str) and 0 < len(value) <= 512:
            caller = alice.as_(purpose_ref=value)  # the host binds whatever fits a purpose
        schema_accepts, refusal = _verdicts(caller, tool, args)
        size = len(value) if isinstance(value, str) else value
        assert schema_accepts == (refusal is None), (name, tool, size, refusal)
        if refusal is not None:
            assert refusal == _expected_refusal(name), (name, size)


ENUM_LOCATIONS: dict[str, tuple[ToolName, Setter]] = {
    "minimum_channels": (
        SEARCH,
        lambda args, value: _at("capability_policy")(
            args, {"minimum_channels": value, "network": "forbid"}
        ),
    ),
    "network": (
        SEARCH,
        lambda args, value: _at("capability_policy")(
            args, {"minimum_channels": "lexical", "network": value}
        ),
    ),
    "kind": (CAPTURE, _at("payload", "components", 0, "kind")),
    "derivative_rule": (
        CAPTURE,
        lambda args, value: _at("payload", "retention")(args, {"derivative_rule": value}),
    ),
}


@pytest.mark.parametrize("name", sorted(SPEC_INPUTS.enums))
def test_enumerations_are_exact_in_both(alice: Caller, name: str) -> None:
    tool, setter = ENUM_LOCATIONS[name]
    caller = alice.as_(purpose_ref=PURPOSE)
    members = SPEC_INPUTS.enums[name]
    for value in (*members, members[0].upper(), f"{members[0]} ", "other"):
        args = _base(tool)
        setter(args, value)
        schema_accepts, refusal = _verdicts(caller, tool, args)
        assert schema_accepts == (value in members) == (refusal is None), (name, value)
        if refusal is not None:
            assert refusal == "INVALID_SCHEMA"


def test_schema_version_is_exactly_the_spec_constant(alice: Caller) -> None:
    caller = alice.as_(purpose_ref=PURPOSE)
    ((name, constant),) = SPEC_INPUTS.consts.items()
    for value in (constant - 1, constant, constant + 1):
        args = _base(CAPTURE)
        args["payload"][name] = value
        schema_accepts, refusal = _verdicts(caller, CAPTURE, args)
        assert schema_accepts == (value == constant) == (refusal is None), value


def test_record_ids_follow_the_spec_pattern_in_both(alice: Caller) -> None:
    pattern = SPEC_INPUTS.patterns["record_id"]
    for tool in (GET, FORGET):
        assert TOOL_SPECS[tool].input_schema["properties"]["record_id"]["pattern"] == pattern
    caller = alice.as_(purpose_ref=PURPOSE)
    for value, valid in (("mem_a2", True), ("mem_", False), ("mem_A", False), ("mem_1", False)):
        for tool in (GET, FORGET):
            args = _base(tool)
            args["record_id"] = value
            schema_accepts, refusal = _verdicts(caller, tool, args)
            assert schema_accepts == valid == (refusal is None), (tool, value)


def test_a_malformed_digest_is_refused_by_both_as_invalid_digest(alice: Caller) -> None:
    caller = alice.as_(purpose_ref=PURPOSE)
    for bad in ("sha256:" + "A" * 64, "sha256:" + "a" * 63, "md5:" + "a" * 64):
        args = _base(CAPTURE)
        args["evidence"]["evidence_digest"] = bad
        schema_accepts, refusal = _verdicts(caller, CAPTURE, args)
        assert (schema_accepts, refusal) == (False, "INVALID_DIGEST"), bad


def _drop(args: Args, dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    node = args
    for part in parents:
        node = node[part]
    del node[leaf]


@pytest.mark.parametrize("tool", list(ToolName))
def test_every_field_spec_requires_is_required_by_both(alice: Caller, tool: ToolName) -> None:
    caller = alice.as_(purpose_ref=PURPOSE)
    required = SPEC_INPUTS.required[tool]
    schema = TOOL_SPECS[tool].input_schema
    # `payload.x` required makes `payload` required.
    assert set(schema["required"]) == {field.split(".")[0] for field in required}
    for field in required:
        args = _base(tool)
        _drop(args, field)
        schema_accepts, refusal = _verdicts(caller, tool, args)
        assert (schema_accepts, refusal) == (False, "INVALID_SCHEMA"), field


@pytest.mark.parametrize(
    "where", [(), ("payload",), ("payload", "components", 0), ("evidence",)], ids=str
)
def test_an_unknown_property_at_any_depth_is_refused_by_both(
    alice: Caller, where: tuple[str | int, ...]
) -> None:
    args = _base(CAPTURE)
    node = args
    for part in where:
        node = node[part]
    node["confirmed"] = True  # SPEC §1.1: a model-written confirmation is an unknown property
    schema_accepts, refusal = _verdicts(alice.as_(purpose_ref=PURPOSE), CAPTURE, args)
    assert (schema_accepts, refusal) == (False, "INVALID_SCHEMA")


def _byte_bounded_strings(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if node.get("type") == "string" and "UTF-8 bytes" in node.get("description", ""):
            yield node
        for value in node.values():
            yield from _byte_bounded_strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _byte_bounded_strings(value)


@pytest.mark.parametrize("name", [n for n, b in SPEC_INPUTS.bounds.items() if b.unit == "bytes"])
def test_what_json_schema_cannot_say_in_bytes_its_description_says(name: str) -> None:
    """Over a byte bound in multi-byte characters, `maxLength` (code points) still passes:
    the one stated gap. Every such string's description gives SPEC's byte bound."""
    bound = SPEC_INPUTS.bounds[name]
    phrase = f"..{bound.high} UTF-8 bytes" if bound.low is None else f"{bound.low}..{bound.high}"
    described = [
        node["description"]
        for tool in ToolName
        for node in _byte_bounded_strings(TOOL_SPECS[tool].input_schema)
        if node["maxLength"] == bound.high and (bound.low is None or node["minLength"] == bound.low)
    ]
    assert described, name
    assert all(phrase in text or f"at most {bound.high} bytes" in text for text in described)


def test_an_instant_that_is_no_real_date_is_the_stated_pattern_gap(alice: Caller) -> None:
    args = _base(CAPTURE)
    args["payload"]["citations"][0]["observed_at"] = "2026-02-30T12:00:00.000Z"
    schema_accepts, refusal = _verdicts(alice.as_(purpose_ref=PURPOSE), CAPTURE, args)
    assert (schema_accepts, refusal) == (True, "INVALID_SCHEMA")
    observed_at = TOOL_SPECS[CAPTURE].input_schema["properties"]["payload"]["properties"][
        "citations"
    ]["items"]["properties"]["observed_at"]
    assert "real date" in observed_at["description"]
