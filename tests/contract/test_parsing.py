"""The parse_arguments entry point: decoding, size cap, code mapping, secrets, purpose binding."""

from __future__ import annotations

from typing import Any

import pytest

from engram_memory.contract.canonical import canonical_json, normalize
from engram_memory.contract.errors import ErrorCode, ProtocolCode
from engram_memory.contract.exceptions import ProtocolRefusal, ToolError
from engram_memory.contract.inputs import CaptureInput, GetInput, SearchInput
from engram_memory.contract.parsing import (
    MAX_ARGUMENTS_BYTES,
    MUTATING_TOOLS,
    ToolName,
    parse_arguments,
)
from engram_memory.contract.secrets import SecretDetector
from tests.contract.examples import (
    PURPOSE,
    full_capture_arguments,
    valid_capture_arguments,
    valid_forget_arguments,
    valid_get_arguments,
    valid_search_arguments,
    valid_withdraw_arguments,
)

CAPTURE = ToolName.CAPTURE
GITHUB_TOKEN = "ghp_" + "Ab1" * 12


def failure(tool: ToolName, arguments: object, **kw: Any) -> ToolError:
    with pytest.raises(ToolError) as caught:
        parse_arguments(tool, arguments, **kw)
    return caught.value


def test_tool_names_and_mutating_set() -> None:
    assert {t.value for t in ToolName} == {
        "engram_memory_search",
        "engram_memory_get",
        "engram_memory_capture",
        "engram_memory_request_admission",
        "engram_memory_withdraw",
        "engram_memory_forget",
    }
    assert frozenset({ToolName.SEARCH, ToolName.GET}).isdisjoint(MUTATING_TOOLS)
    assert len(MUTATING_TOOLS) == 4


def test_arguments_are_kept_as_received_without_defaults() -> None:
    parsed = parse_arguments(ToolName.SEARCH, valid_search_arguments())
    assert parsed.arguments == {"query": "documented correction", "purpose_ref": PURPOSE}
    model = parsed.expect(SearchInput)
    assert model.limit is None
    assert model.effective_limit == 10
    assert model.effective_max_packet_bytes == 65_536
    assert model.effective_capability_policy.network == "forbid"
    assert (
        "retention" not in parse_arguments(CAPTURE, valid_capture_arguments()).arguments["payload"]
    )


def test_arguments_and_model_hold_the_nfc_form() -> None:
    parsed = parse_arguments(ToolName.SEARCH, valid_search_arguments(query="cafe\u0301"))
    assert parsed.arguments["query"] == "caf\u00e9"
    assert parsed.expect(SearchInput).query == "caf\u00e9"


def test_expect_refuses_the_wrong_model() -> None:
    parsed = parse_arguments(ToolName.GET, valid_get_arguments())
    assert isinstance(parsed.expect(GetInput), GetInput)
    with pytest.raises(TypeError):
        parsed.expect(CaptureInput)


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "x", "purpose_ref": PURPOSE, "limit": -0.0},
        {"query": "x", "purpose_ref": PURPOSE, "limit": float("nan")},
        {"query": "x", "purpose_ref": PURPOSE, "limit": float("inf")},
        {"query": "x", "purpose_ref": PURPOSE, "limit": 2**53},
        {"query": "x\ud800", "purpose_ref": PURPOSE},
        {"query": "x", "purpose_ref": PURPOSE, "caf\u00e9": 1, "cafe\u0301": 2},
        {"query": "x", "purpose_ref": PURPOSE, 1: "non-string key"},
    ],
)
def test_non_canonical_arguments_are_invalid_schema(arguments: dict[Any, Any]) -> None:
    assert failure(ToolName.SEARCH, arguments).code is ErrorCode.INVALID_SCHEMA


def test_deeply_nested_arguments_are_invalid_schema() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    arguments = valid_search_arguments(page_cursor=deep)
    assert failure(ToolName.SEARCH, arguments).code is ErrorCode.INVALID_SCHEMA


def _query_of_total_size(total: int) -> dict[str, Any]:
    base = len(canonical_json(normalize(valid_search_arguments(query=""))))
    return valid_search_arguments(query="q" * (total - base))


def test_argument_object_of_exactly_one_mebibyte_is_decoded() -> None:
    arguments = _query_of_total_size(MAX_ARGUMENTS_BYTES)
    assert len(canonical_json(normalize(arguments))) == MAX_ARGUMENTS_BYTES
    # It decodes; the query's own 8,192-byte bound is what refuses it.
    error = failure(ToolName.SEARCH, arguments)
    assert error.code is ErrorCode.INVALID_SCHEMA
    assert "query" in error.detail


def test_argument_object_above_one_mebibyte_is_refused_before_validation() -> None:
    error = failure(ToolName.SEARCH, _query_of_total_size(MAX_ARGUMENTS_BYTES + 1))
    assert error.code is ErrorCode.INVALID_SCHEMA
    assert "too_large" in error.detail


def test_a_malformed_digest_alone_is_invalid_digest() -> None:
    arguments = full_capture_arguments()
    arguments["payload"]["citations"][1]["content_digest"] = "sha256:NOT-HEX"
    arguments["evidence"]["evidence_digest"] = "md5:abc"
    assert failure(CAPTURE, arguments).code is ErrorCode.INVALID_DIGEST


def test_a_malformed_digest_with_another_field_defect_is_invalid_schema() -> None:
    arguments = valid_capture_arguments()
    arguments["evidence"]["evidence_digest"] = "md5:abc"
    arguments["payload"]["components"][0]["kind"] = "opinion"
    assert failure(CAPTURE, arguments).code is ErrorCode.INVALID_SCHEMA


def test_a_malformed_digest_with_a_cross_reference_defect_is_invalid_schema() -> None:
    arguments = valid_capture_arguments()
    arguments["evidence"]["evidence_digest"] = "md5:abc"
    arguments["payload"]["primary_component_id"] = "component:missing"
    assert failure(CAPTURE, arguments).code is ErrorCode.INVALID_SCHEMA


def test_a_malformed_digest_with_a_secret_is_invalid_schema() -> None:
    arguments = valid_capture_arguments(text=f"use {GITHUB_TOKEN}")
    arguments["evidence"]["evidence_digest"] = "md5:abc"
    assert failure(CAPTURE, arguments).code is ErrorCode.INVALID_SCHEMA


def test_a_digest_of_the_wrong_type_is_invalid_schema() -> None:
    arguments = valid_capture_arguments()
    arguments["evidence"]["evidence_digest"] = 7
    assert failure(CAPTURE, arguments).code is ErrorCode.INVALID_SCHEMA


def test_a_missing_digest_is_invalid_schema() -> None:
    arguments = valid_capture_arguments()
    del arguments["evidence"]["evidence_digest"]
    assert failure(CAPTURE, arguments).code is ErrorCode.INVALID_SCHEMA


def test_detail_never_contains_input_text() -> None:
    arguments = valid_capture_arguments()
    arguments["payload"][GITHUB_TOKEN] = "value-" + GITHUB_TOKEN
    arguments["payload"]["components"][0]["text"] = ""
    error = failure(CAPTURE, arguments)
    assert error.code is ErrorCode.INVALID_SCHEMA
    assert GITHUB_TOKEN not in error.detail
    assert "value-" not in error.detail
    assert "payload.components.0.text" in error.detail


SECRETS = [
    "-----BEGIN RSA PRIVATE KEY-----",
    "AKIAIOSFODNN7EXAMPLE",
    GITHUB_TOKEN,
    "postgres://app:s3cr3tpw@db.internal/app",
    "password=hunter22",
    "Authorization: Bearer abc123def456ghi789",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_secret_in_any_stored_capture_string_is_refused_without_echo(secret: str) -> None:
    targets = [
        ("payload", "components", 0, "text"),
        ("payload", "citations", 0, "source_ref"),
        ("payload", "citations", 0, "locator", "value"),
        ("payload", "primary_event", "type_ref"),
        ("payload", "reconciliation", "family_refs", 1),
        ("evidence", "attestation"),
        ("evidence", "evidence_ref"),
    ]
    for path in targets:
        arguments = full_capture_arguments()
        node: Any = arguments
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = f"note {secret}"
        error = failure(CAPTURE, arguments)
        assert error.code is ErrorCode.INVALID_SCHEMA, path
        assert secret not in error.detail
        assert "note" not in error.detail


@pytest.mark.parametrize("secret", SECRETS)
def test_secret_in_reason_ref_is_refused(secret: str) -> None:
    for tool, build in [
        (ToolName.WITHDRAW, valid_withdraw_arguments),
        (ToolName.FORGET, valid_forget_arguments),
    ]:
        arguments = build()
        arguments["reason_ref"] = secret
        error = failure(tool, arguments)
        assert error.code is ErrorCode.INVALID_SCHEMA
        assert secret not in error.detail


def test_search_queries_are_not_stored_so_not_scanned() -> None:
    parse_arguments(ToolName.SEARCH, valid_search_arguments(query="password=hunter22"))


def test_policy_patterns_extend_the_detector() -> None:
    detector = SecretDetector(extra_patterns=[r"\bACME-[0-9]{6}\b"])
    arguments = valid_capture_arguments(text="badge ACME-123456")
    parse_arguments(CAPTURE, arguments)
    assert failure(CAPTURE, arguments, detector=detector).code is ErrorCode.INVALID_SCHEMA


def test_bound_purpose_mismatch_is_a_protocol_refusal_before_schema_errors() -> None:
    arguments = valid_capture_arguments()
    arguments["payload"]["purpose_ref"] = "purpose:other"
    arguments["payload"]["components"][0]["kind"] = "opinion"
    with pytest.raises(ProtocolRefusal) as caught:
        parse_arguments(CAPTURE, arguments, bound_purpose_ref=PURPOSE)
    assert caught.value.code is ProtocolCode.CONTEXT_UNAVAILABLE


def test_bound_purpose_is_compared_in_nfc() -> None:
    arguments = valid_search_arguments(purpose_ref="purpose:caf\u00e9")
    parse_arguments(ToolName.SEARCH, arguments, bound_purpose_ref="purpose:cafe\u0301")


def test_missing_purpose_is_a_schema_error_not_a_refusal() -> None:
    arguments = {"record_id": "mem_abc"}
    error = failure(ToolName.GET, arguments, bound_purpose_ref=PURPOSE)
    assert error.code is ErrorCode.INVALID_SCHEMA


def test_tools_without_purpose_ignore_the_bound_purpose() -> None:
    parse_arguments(ToolName.FORGET, valid_forget_arguments(), bound_purpose_ref="purpose:x")


def test_unknown_tool_name_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="engram_memory_admin"):
        parse_arguments("engram_memory_admin", {})  # type: ignore[arg-type]
