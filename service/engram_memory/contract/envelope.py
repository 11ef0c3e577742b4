"""The result envelope every tool call returns (SPEC §2), and its JSON Schema.

The envelope is returned as MCP `structuredContent` and, identically, as one JCS text item.
Failure envelopes carry only constants: the code's name, its fixed message and `retriable`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engram_memory.contract.canonical import JsonValue, canonical_text, normalize
from engram_memory.contract.errors import ErrorCode

SCHEMA_VERSION = 1
REDACTION_CLASS = "high"


def success_envelope(value: Mapping[str, JsonValue], audit_id: str) -> dict[str, JsonValue]:
    """`{"ok": true, "output": {"schema_version": 1, "value": …}, "auditId", "redactionClass"}`."""
    return {
        "ok": True,
        "output": {"schema_version": SCHEMA_VERSION, "value": dict(value)},
        "auditId": audit_id,
        "redactionClass": REDACTION_CLASS,
    }


def failure_envelope(code: ErrorCode, audit_id: str) -> dict[str, JsonValue]:
    """`{"ok": false, "auditId", "redactionClass", "error": {code, message, retriable}}`."""
    return {
        "ok": False,
        "auditId": audit_id,
        "redactionClass": REDACTION_CLASS,
        "error": {"code": code.name, "message": code.message, "retriable": code.retriable},
    }


def envelope_json(envelope: Mapping[str, JsonValue]) -> str:
    """The JCS text of an envelope, for the MCP text content item.

    Raises:
        NonCanonicalValue: the envelope holds a value JSON cannot carry canonically.
    """
    return canonical_text(normalize(envelope))


def failure_schema() -> dict[str, Any]:
    """JSON Schema of a failure envelope; `code` is one of the ErrorCode names."""
    return {
        "type": "object",
        "properties": {
            "ok": {"const": False},
            "auditId": {"type": "string"},
            "redactionClass": {"const": REDACTION_CLASS},
            "error": {
                "type": "object",
                "properties": {
                    "code": {"enum": [code.name for code in ErrorCode]},
                    "message": {"type": "string"},
                    "retriable": {"type": "boolean"},
                },
                "required": ["code", "message", "retriable"],
                "additionalProperties": False,
            },
        },
        "required": ["ok", "auditId", "redactionClass", "error"],
        "additionalProperties": False,
    }


def success_schema(value_schema: Mapping[str, Any]) -> dict[str, Any]:
    """JSON Schema of a success envelope around a tool's output value schema."""
    return {
        "type": "object",
        "properties": {
            "ok": {"const": True},
            "output": {
                "type": "object",
                "properties": {
                    "schema_version": {"const": SCHEMA_VERSION},
                    "value": dict(value_schema),
                },
                "required": ["schema_version", "value"],
                "additionalProperties": False,
            },
            "auditId": {"type": "string"},
            "redactionClass": {"const": REDACTION_CLASS},
        },
        "required": ["ok", "output", "auditId", "redactionClass"],
        "additionalProperties": False,
    }


def envelope_schema(value_schema: Mapping[str, Any]) -> dict[str, Any]:
    """The `outputSchema` of a tool: its success envelope or a failure envelope.

    The top level says `"type": "object"`, as MCP requires of an output schema.
    """
    return {
        "type": "object",
        "oneOf": [success_schema(value_schema), failure_schema()],
    }
