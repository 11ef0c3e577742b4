"""Published tool definitions, envelopes and output models (SPEC §1.2, §2, §4)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from engram_memory.contract.envelope import envelope_json, failure_envelope, success_envelope
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.outputs import validate_output
from engram_memory.contract.schemas import TOOL_SPECS
from engram_memory.contract.types import ToolName
from tests.contract.examples import CANDIDATE_ID, RECORD_ID, VALID_ARGUMENTS

D = "sha256:" + "c" * 64
INSTANT = "2026-08-16T12:34:56.789Z"


def _objects(node: Any, path: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            yield path, node
        for key, value in node.items():
            yield from _objects(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _objects(value, f"{path}/{index}")


def _all_values(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _all_values(value)
    elif isinstance(node, list):
        for value in node:
            yield from _all_values(value)


def test_there_is_one_spec_per_tool() -> None:
    assert set(TOOL_SPECS) == set(ToolName)
    for name, spec in TOOL_SPECS.items():
        assert spec.name == name
        assert spec.title
        assert spec.description


@pytest.mark.parametrize("tool", list(ToolName))
def test_input_schema_is_closed_at_every_depth(tool: ToolName) -> None:
    schema = TOOL_SPECS[tool].input_schema
    assert schema["type"] == "object"
    objects = list(_objects(schema))
    assert objects
    for path, node in objects:
        assert node.get("additionalProperties") is False, path


@pytest.mark.parametrize("tool", list(ToolName))
def test_schemas_have_no_refs_and_never_admit_null(tool: ToolName) -> None:
    spec = TOOL_SPECS[tool]
    for schema in (spec.input_schema, spec.output_schema):
        values = list(_all_values(schema))
        assert "$ref" not in values
        assert "$defs" not in values
        assert "null" not in values
        json.dumps(schema)  # plain JSON


def test_capture_schema_exposes_bounds_and_requirements() -> None:
    schema = TOOL_SPECS[ToolName.CAPTURE].input_schema
    assert schema["required"] == ["idempotency_key", "payload", "evidence"]
    payload = schema["properties"]["payload"]
    assert "scope_ref" not in payload["properties"]
    assert "retention" not in payload["required"]
    assert payload["properties"]["components"]["maxItems"] == 64
    component = payload["properties"]["components"]["items"]
    assert component["properties"]["kind"]["enum"] == ["context", "decision", "evidence"]
    assert component["properties"]["citation_ids"]["uniqueItems"] is True
    assert "65536 UTF-8 bytes" in component["properties"]["text"]["description"]
    key = schema["properties"]["idempotency_key"]
    assert (key["minLength"], key["maxLength"]) == (16, 256)


def test_search_schema_has_no_materialized_defaults() -> None:
    schema = TOOL_SPECS[ToolName.SEARCH].input_schema
    assert schema["required"] == ["query", "purpose_ref"]
    assert "default" not in schema["properties"]["limit"]
    policy = schema["properties"]["capability_policy"]
    assert policy["required"] == ["minimum_channels", "network"]


def test_annotations_mark_reads_and_destructive_transitions() -> None:
    hints = {name: spec.annotations for name, spec in TOOL_SPECS.items()}
    assert hints[ToolName.SEARCH]["readOnlyHint"] is True
    assert hints[ToolName.GET]["readOnlyHint"] is True
    assert hints[ToolName.WITHDRAW]["destructiveHint"] is True
    assert hints[ToolName.FORGET]["destructiveHint"] is True
    assert hints[ToolName.CAPTURE]["destructiveHint"] is False
    assert hints[ToolName.REQUEST_ADMISSION]["destructiveHint"] is False
    for name in (ToolName.CAPTURE, ToolName.REQUEST_ADMISSION, ToolName.WITHDRAW):
        assert hints[name]["idempotentHint"] is True


@pytest.mark.parametrize("tool", list(ToolName))
def test_output_schema_is_the_envelope_of_the_tool_output(tool: ToolName) -> None:
    schema = TOOL_SPECS[tool].output_schema
    assert schema["type"] == "object"
    success, failure = schema["oneOf"]
    assert success["properties"]["ok"] == {"const": True}
    value = success["properties"]["output"]["properties"]["value"]
    assert value["type"] == "object"
    codes = failure["properties"]["error"]["properties"]["code"]["enum"]
    assert codes == [code.name for code in ErrorCode]
    assert "gate_failed" in codes


def test_redacted_record_schema_requires_only_record_id() -> None:
    schema = TOOL_SPECS[ToolName.GET].output_schema
    value = schema["oneOf"][0]["properties"]["output"]["properties"]["value"]
    record = value["properties"]["record"]
    assert record["required"] == ["record_id"]


def test_success_envelope_shape() -> None:
    envelope = success_envelope({"replayed": False}, "audit-1")
    assert envelope == {
        "ok": True,
        "output": {"schema_version": 1, "value": {"replayed": False}},
        "auditId": "audit-1",
        "redactionClass": "high",
    }


def test_failure_envelope_carries_only_constants() -> None:
    envelope = failure_envelope(ErrorCode.MUTATION_OUTCOME_UNKNOWN, "audit-2")
    assert envelope["ok"] is False
    assert envelope["error"] == {
        "code": "MUTATION_OUTCOME_UNKNOWN",
        "message": ErrorCode.MUTATION_OUTCOME_UNKNOWN.message,
        "retriable": True,
    }
    assert set(envelope) == {"ok", "auditId", "redactionClass", "error"}


def test_envelope_text_is_jcs() -> None:
    envelope = success_envelope({"score": 5.0, "b": "é", "a": 1e-7}, "audit-3")
    text = envelope_json(envelope)
    assert text == (
        '{"auditId":"audit-3","ok":true,"output":{"schema_version":1,'
        '"value":{"a":1e-7,"b":"é","score":5}},"redactionClass":"high"}'
    )


# --- output values -----------------------------------------------------------------------------

RANK_RECEIPT = {
    "request_digest": D,
    "authorization_receipt_digest": D,
    "profile": "offline_lexical_v1",
    "profile_version": "1.0.0",
    "profile_config_digest": D,
    "valid_as_of": 1755350096789,
    "system_as_of": "7",
    "snapshot_id": "snapshot:7",
    "snapshot_digest": D,
    "candidate_count": 1,
    "candidate_ids_digest": D,
    "scoring_formula_ref": "graphify-memory:offline-lexical-recency:v1",
    "ordered_ids_digest": D,
    "revalidation_receipt_digest": D,
    "projection_receipt_digests": [],
    "issued_at": INSTANT,
    "receipt_digest": D,
}
READ_RECEIPT = {
    "record_id": RECORD_ID,
    "record_digest": D,
    "valid_as_of": 1755350096789,
    "system_as_of": "7",
    "validated_through_cursor": "7",
    "authorization_receipt_digest": D,
    "revalidation_receipt_digest": D,
    "checked_at": INSTANT,
    "receipt_digest": D,
}
PACKET = {"record": {"record_id": RECORD_ID}, "redacted_fields": ["/citations"]}
TRANSITION = {
    "event_id": "withdraw:" + CANDIDATE_ID,
    "cursor": "8",
    "event_digest": D,
    "authorization_receipt_digest": D,
    "transaction_receipt_digest": D,
}

VALID_OUTPUTS: list[tuple[ToolName, dict[str, Any]]] = [
    (
        ToolName.SEARCH,
        {
            "records": [{**PACKET, "redaction_receipt_digest": D, "score": 1, "rank": 1}],
            "rank_receipt": RANK_RECEIPT,
            "next_page_cursor": "cursor",
            "response_digest": D,
        },
    ),
    (ToolName.SEARCH, {"records": [], "rank_receipt": RANK_RECEIPT, "response_digest": D}),
    (
        ToolName.GET,
        {
            **PACKET,
            "record": {"record_id": RECORD_ID, "recorded_at": INSTANT, "valid_time": {"t": 1}},
            "redaction_receipt_digest": D,
            "read_receipt": READ_RECEIPT,
            "packet_digest": D,
        },
    ),
    (
        ToolName.CAPTURE,
        {
            "status": "committed_pending",
            "candidate_id": CANDIDATE_ID,
            "record_digest": D,
            "cursor": "1",
            "transaction_receipt_digest": D,
        },
    ),
    (
        ToolName.REQUEST_ADMISSION,
        {
            "outcome": {
                "status": "accepted",
                "candidate_id": CANDIDATE_ID,
                "record_id": RECORD_ID,
                "cursor": "2",
                "decision_receipt_digest": D,
                "transaction_receipt_digest": D,
            },
            "replayed": False,
        },
    ),
    (
        ToolName.WITHDRAW,
        {
            "receipt": {
                **TRANSITION,
                "operation": "withdraw",
                "from_state": "pending",
                "to_state": "withdrawn",
            },
            "replayed": True,
            "key_destruction": "complete",
        },
    ),
    (
        ToolName.FORGET,
        {
            "receipt": {
                **TRANSITION,
                "operation": "tombstone",
                "from_state": "expired",
                "to_state": "tombstoned",
            },
            "replayed": False,
            "projection_invalidation": "complete",
            "coverage_receipt_digest": D,
        },
    ),
]


@pytest.mark.parametrize(("tool", "value"), VALID_OUTPUTS)
def test_output_models_accept_contract_values(tool: ToolName, value: dict[str, Any]) -> None:
    validate_output(tool, value)


@pytest.mark.parametrize(
    ("tool", "value"),
    [
        (ToolName.SEARCH, {"records": [], "rank_receipt": RANK_RECEIPT}),
        (ToolName.CAPTURE, {**VALID_OUTPUTS[3][1], "status": "accepted"}),
        (ToolName.CAPTURE, {**VALID_OUTPUTS[3][1], "cursor": "01"}),
        (ToolName.GET, {**VALID_OUTPUTS[2][1], "record": {"recorded_at": INSTANT}}),
        (ToolName.GET, {**VALID_OUTPUTS[2][1], "record": {"record_id": RECORD_ID, "x": 1}}),
        (ToolName.SEARCH, {**VALID_OUTPUTS[1][1], "next_page_cursor": None}),
    ],
)
def test_output_models_refuse_off_contract_values(tool: ToolName, value: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        validate_output(tool, value)


@pytest.mark.parametrize(("tool", "value"), VALID_OUTPUTS)
def test_envelopes_validate_against_the_published_output_schema(
    tool: ToolName, value: dict[str, Any]
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(TOOL_SPECS[tool].output_schema)
    validator.check_schema(TOOL_SPECS[tool].output_schema)
    assert not list(validator.iter_errors(success_envelope(value, "audit-4")))
    assert not list(validator.iter_errors(failure_envelope(ErrorCode.NOT_FOUND, "audit-4")))
    broken = success_envelope({**value, "unexpected": 1}, "audit-4")
    assert list(validator.iter_errors(broken))


@pytest.mark.parametrize("tool", list(ToolName))
def test_input_schemas_are_valid_json_schema_and_accept_the_examples(tool: ToolName) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = TOOL_SPECS[tool].input_schema
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors(VALID_ARGUMENTS[tool.value]()))
