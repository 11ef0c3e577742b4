"""The published MCP tool definitions, generated from the contract models (single source).

Input schemas are closed at every depth (`additionalProperties: false`) and inlined (no
`$ref`), since several MCP clients resolve references poorly. JSON Schema cannot state byte
lengths, NFC or cross-references: descriptions say so, and the validators are authoritative
(SPEC §1.2).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from engram_memory.contract.envelope import envelope_schema
from engram_memory.contract.inputs import INPUT_MODELS
from engram_memory.contract.outputs import OUTPUT_MODELS
from engram_memory.contract.types import ContractJsonSchema, ToolName

_LIMITS_NOTE = (
    " String bounds are UTF-8 bytes after NFC; ids, cursors and keys are opaque and copied "
    "exactly; null is never valid and unknown properties are refused."
)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One MCP tool definition: what `tools/list` shows for a visible tool."""

    name: ToolName
    title: str
    description: str
    annotations: Mapping[str, Any]
    input_schema: Mapping[str, Any] = field(repr=False)
    output_schema: Mapping[str, Any] = field(repr=False)


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The inlined (no `$ref`) JSON Schema 2020-12 of a contract model."""
    schema = model.model_json_schema(schema_generator=ContractJsonSchema)
    defs = schema.pop("$defs", {})
    inlined = _inline(schema, defs)
    assert isinstance(inlined, dict)
    return inlined


def _inline(node: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = copy.deepcopy(defs[ref.removeprefix("#/$defs/")])
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            return _inline({**target, **siblings}, defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node


_READ = {"readOnlyHint": True, "openWorldHint": False}
_APPEND = {
    "readOnlyHint": False,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}
_DESTROY = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": True,
    "openWorldHint": False,
}

_TEXTS: Mapping[ToolName, tuple[str, str, Mapping[str, Any]]] = {
    ToolName.SEARCH: (
        "Search memory",
        "Search the accepted, current memory records of the bound scope and return ranked, "
        "redacted record packets with a rank receipt. purpose_ref must be your bound purpose. "
        "Pass next_page_cursor back as page_cursor, with identical other arguments, to "
        "continue.",
        _READ,
    ),
    ToolName.GET: (
        "Get a memory record",
        "Read one accepted, current record by record_id, redacted, with a read receipt. "
        "NOT_FOUND means unavailable, whatever the reason; do not probe.",
        _READ,
    ),
    ToolName.CAPTURE: (
        "Capture a memory candidate",
        "Submit a memory candidate (components citing sources, plus evidence). It stays "
        "pending, sealed and unsearchable until request_admission accepts it. Never include "
        "secrets, credentials, tokens or passwords. Omit retention and reconciliation unless "
        "instructed. Reuse the idempotency_key only to retry the same capture.",
        _APPEND,
    ),
    ToolName.REQUEST_ADMISSION: (
        "Request admission of a candidate",
        "Ask the admission policy to accept a pending candidate (candidate_id from capture). "
        "rejected and pending_adjudication are normal outcomes; read status and replayed.",
        _APPEND,
    ),
    ToolName.WITHDRAW: (
        "Withdraw a pending candidate",
        "Withdraw a pending candidate and destroy its content key. Requires a human "
        "confirmation through the host; irreversible.",
        _DESTROY,
    ),
    ToolName.FORGET: (
        "Forget a memory record",
        "Tombstone a record: it is never returned again and its content key is destroyed. "
        "Requires a human confirmation through the host; irreversible.",
        _DESTROY,
    ),
}


def _build() -> Mapping[ToolName, ToolSpec]:
    specs: dict[ToolName, ToolSpec] = {}
    for name in ToolName:
        title, description, hints = _TEXTS[name]
        specs[name] = ToolSpec(
            name=name,
            title=title,
            description=description + _LIMITS_NOTE,
            annotations={"title": title, **hints},
            input_schema=model_schema(INPUT_MODELS[name]),
            output_schema=envelope_schema(model_schema(OUTPUT_MODELS[name])),
        )
    return MappingProxyType(specs)


TOOL_SPECS: Mapping[ToolName, ToolSpec] = _build()
