"""The single entry point from raw tool arguments to a validated input (SPEC §1, §3, §4, §11).

Steps, the first failure deciding: object check → `normalize` (NFC, no null, no duplicate
keys, safe numbers) → 1 MiB JCS cap → bound `purpose_ref` (optional, protocol refusal) →
model validation (closed schemas, bounds, cross-references) → never-store detector.

Every failure is INVALID_SCHEMA except a malformed digest string that is the only defect,
which is INVALID_DIGEST. A `ToolError.detail` names field paths and error types, never input
text: unknown property names are input, so they are masked.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from engram_memory.contract.canonical import JsonValue, canonical_json, nfc, normalize
from engram_memory.contract.classifiers import EMPTY_SET, ClassifierSet
from engram_memory.contract.digests import (
    ZERO_DIGEST,
    operation_digest,
    operation_digest_of_json,
)
from engram_memory.contract.errors import ErrorCode, ProtocolCode
from engram_memory.contract.exceptions import NonCanonicalValue, ProtocolRefusal, ToolError
from engram_memory.contract.inputs import INPUT_MODELS, ToolInput
from engram_memory.contract.secrets import DEFAULT_DETECTOR, SecretDetector
from engram_memory.contract.types import DIGEST_FORMAT_ERROR, MUTATING_TOOLS, ToolName

MAX_ARGUMENTS_BYTES = 1_048_576
_MAX_DETAIL_ERRORS = 8

M = TypeVar("M", bound=ToolInput)


@dataclass(frozen=True, slots=True)
class ParsedArguments:
    """A validated call: the typed input and the normalized arguments exactly as received.

    `arguments` holds no defaults; it is what the operation digest (SPEC §6) covers.
    """

    tool: ToolName
    model: ToolInput
    arguments: dict[str, JsonValue]
    # The scope's content classifiers (policy data, handed over by discovery): the tool runs
    # them on the plaintext it holds and gives policy only the names that matched.
    classifiers: ClassifierSet = EMPTY_SET
    # The RFC 8785 bytes of `arguments`, from decoding (None: not kept): the operation digest
    # is computed from them instead of serializing the arguments again.
    arguments_json: bytes | None = None

    def operation_digest(self, tool: str) -> str:
        """SPEC §6's digest of this call's arguments (`digests.operation_digest`)."""
        if self.arguments_json is None:
            return operation_digest(tool, self.arguments)
        return operation_digest_of_json(tool, self.arguments_json)

    def expect(self, model_type: type[M]) -> M:
        """`model` as `model_type` (e.g. `parsed.expect(CaptureInput)`).

        Raises:
            TypeError: the arguments belong to another tool (a programming error).
        """
        if not isinstance(self.model, model_type):
            raise TypeError(f"{self.tool} arguments are not {model_type.__name__}")
        return self.model


def decode_arguments(raw: object) -> dict[str, JsonValue]:
    """Normalize raw arguments and enforce the argument-object size cap (SPEC §3).

    Raises:
        ToolError: as `decode_arguments_json`.
    """
    return decode_arguments_json(raw)[0]


def decode_arguments_json(raw: object) -> tuple[dict[str, JsonValue], bytes]:
    """`decode_arguments`, with the RFC 8785 bytes it measured (kept for the operation digest).

    Raises:
        ToolError: INVALID_SCHEMA if `raw` is not an object, is not canonicalizable (null,
            duplicate key after NFC, unpaired surrogate, unsafe or non-finite number), is
            nested too deeply, or exceeds 1,048,576 bytes in compact JCS form.
    """
    if not isinstance(raw, Mapping):
        raise ToolError(ErrorCode.INVALID_SCHEMA, "arguments:not_an_object")
    try:
        arguments = normalize(raw)
        serialized = canonical_json(arguments)
    except NonCanonicalValue as exc:
        raise ToolError(ErrorCode.INVALID_SCHEMA, f"arguments:{exc}") from None
    except RecursionError:
        raise ToolError(ErrorCode.INVALID_SCHEMA, "arguments:too_deep") from None
    if len(serialized) > MAX_ARGUMENTS_BYTES:
        raise ToolError(ErrorCode.INVALID_SCHEMA, "arguments:too_large")
    assert isinstance(arguments, dict)
    return arguments, serialized


def declared_purpose_ref(tool: ToolName, arguments: Mapping[str, JsonValue]) -> str | None:
    """The `purpose_ref` the (decoded) arguments declare, if the tool has one and it is a str."""
    holder: object = arguments
    if tool is ToolName.CAPTURE:
        holder = arguments.get("payload")
    elif tool not in (ToolName.SEARCH, ToolName.GET):
        return None
    value = holder.get("purpose_ref") if isinstance(holder, Mapping) else None
    return value if isinstance(value, str) else None


def check_bound_purpose(
    tool: ToolName, arguments: Mapping[str, JsonValue], bound_purpose_ref: str
) -> None:
    """SPEC §1.4: a declared `purpose_ref` must equal the host-bound one after NFC.

    A missing or ill-typed `purpose_ref` is left to schema validation (INVALID_SCHEMA).

    Raises:
        ProtocolRefusal: CONTEXT_UNAVAILABLE (-32603) on a mismatch.
    """
    declared = declared_purpose_ref(tool, arguments)
    if declared is None:
        return
    try:
        bound = nfc(bound_purpose_ref)
    except NonCanonicalValue:
        raise ProtocolRefusal(ProtocolCode.CONTEXT_UNAVAILABLE, "purpose:unusable") from None
    if declared != bound:
        raise ProtocolRefusal(ProtocolCode.CONTEXT_UNAVAILABLE, "purpose:mismatch")


def validate_arguments(
    tool: ToolName,
    arguments: dict[str, JsonValue],
    *,
    detector: SecretDetector = DEFAULT_DETECTOR,
    arguments_json: bytes | None = None,
) -> ParsedArguments:
    """Validate decoded arguments against the tool's input contract, then scan for secrets
    (`arguments_json`: their bytes from `decode_arguments_json`, kept with them).

    Raises:
        ToolError: INVALID_DIGEST if malformed digest strings are the only defect, else
            INVALID_SCHEMA for any schema, cross-reference or never-store violation.
        ValueError: `tool` is not one of the six tools (a programming error: unknown tools
            are refused at the protocol layer).
    """
    name = ToolName(tool)
    model_type = INPUT_MODELS[name]
    try:
        model = model_type.model_validate(arguments)
    except ValidationError as exc:
        raise _schema_failure(name, arguments, exc, detector) from None
    if holds_secret(name, arguments, detector):
        raise ToolError(ErrorCode.INVALID_SCHEMA, _never_store_detail(name, arguments, detector))
    return ParsedArguments(
        tool=name, model=model, arguments=arguments, arguments_json=arguments_json
    )


def parse_arguments(
    tool: ToolName,
    raw: object,
    *,
    bound_purpose_ref: str | None = None,
    detector: SecretDetector = DEFAULT_DETECTOR,
) -> ParsedArguments:
    """Decode, check the bound purpose (when given), validate and scan raw tool arguments.

    Pass `bound_purpose_ref` (the host-bound purpose) to keep the SPEC §1.8 order, where a
    purpose mismatch is refused before any schema error is reported.

    Raises:
        ToolError: INVALID_SCHEMA or INVALID_DIGEST, see `decode_arguments` and
            `validate_arguments`.
        ProtocolRefusal: CONTEXT_UNAVAILABLE when `purpose_ref` differs from the bound one.
        ValueError: `tool` is not one of the six tools.
    """
    name = ToolName(tool)
    arguments = decode_arguments(raw)
    if bound_purpose_ref is not None:
        check_bound_purpose(name, arguments, bound_purpose_ref)
    return validate_arguments(name, arguments, detector=detector)


def is_mutating(tool: ToolName) -> bool:
    return tool in MUTATING_TOOLS


# ---------------------------------------------------------------------------------------------


def _schema_failure(
    tool: ToolName,
    arguments: dict[str, JsonValue],
    exc: ValidationError,
    detector: SecretDetector,
) -> ToolError:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    detail = _detail(errors)
    digest_locs = [e["loc"] for e in errors if e["type"] == DIGEST_FORMAT_ERROR]
    if not digest_locs or len(digest_locs) != len(errors):
        return ToolError(ErrorCode.INVALID_SCHEMA, detail)
    # The digests are the only defect iff the arguments pass once they are well formed:
    # model-level cross-reference checks only run after every field validated.
    repaired = copy.deepcopy(arguments)
    for loc in digest_locs:
        _replace_at(repaired, loc, ZERO_DIGEST)
    try:
        INPUT_MODELS[tool].model_validate(repaired)
    except ValidationError as again:
        more = again.errors(include_url=False, include_input=False, include_context=False)
        return ToolError(ErrorCode.INVALID_SCHEMA, detail + ";" + _detail(more))
    if holds_secret(tool, repaired, detector):
        never_store = _never_store_detail(tool, repaired, detector)
        return ToolError(ErrorCode.INVALID_SCHEMA, detail + ";" + never_store)
    return ToolError(ErrorCode.INVALID_DIGEST, detail)


def _replace_at(tree: JsonValue, loc: tuple[int | str, ...], value: str) -> None:
    node = tree
    for step in loc[:-1]:
        node = node[step]
    node[loc[-1]] = value


def _detail(errors: list[Any]) -> str:
    parts = []
    for error in errors[:_MAX_DETAIL_ERRORS]:
        loc = list(error["loc"])
        if error["type"] == "extra_forbidden" and loc:
            loc[-1] = "<unknown>"  # the property name is agent input
        path = ".".join(str(step) for step in loc) or "arguments"
        parts.append(f"{path}:{error['type']}")
    if len(errors) > _MAX_DETAIL_ERRORS:
        parts.append(f"+{len(errors) - _MAX_DETAIL_ERRORS}")
    return ";".join(parts)


def holds_secret(
    tool: ToolName, arguments: Mapping[str, JsonValue], detector: SecretDetector
) -> bool:
    """Scan what would be stored: capture payload and evidence strings, and `reason_ref`.

    A capture's component texts and citation locators are also scanned concatenated (the
    detector's seam view), so that a secret split across two of them is seen whole.
    """
    if tool is ToolName.CAPTURE:
        scanned = [arguments.get("payload"), arguments.get("evidence")]
        return detector.capture_holds_secret(list(_strings(scanned)), _seam_fields(arguments))
    if tool in (ToolName.WITHDRAW, ToolName.FORGET):
        return detector.any_secret(_strings([arguments.get("reason_ref")]))
    return False


def _never_store_detail(
    tool: ToolName, arguments: Mapping[str, JsonValue], detector: SecretDetector
) -> str:
    """`arguments:never_store:<name>` when a policy-data pattern refused the call (the audit
    names the pattern, never what it matched), else `arguments:never_store`."""
    if tool is ToolName.CAPTURE:
        scanned = [arguments.get("payload"), arguments.get("evidence")]
        shape = detector.policy_shape(list(_strings(scanned)), _seam_fields(arguments))
    else:
        shape = detector.policy_shape(list(_strings([arguments.get("reason_ref")])), ())
    return "arguments:never_store" if shape is None else f"arguments:never_store:{shape}"


def _seam_fields(arguments: Mapping[str, JsonValue]) -> list[str]:
    """Component texts, then citation locator values, in the order given (the scheme, a
    short word, would sit between a text and its locator and hide a split)."""
    payload = arguments.get("payload")
    if not isinstance(payload, dict):
        return []
    fields: list[str] = []
    components = payload.get("components")
    for component in components if isinstance(components, list) else []:
        text = component.get("text") if isinstance(component, dict) else None
        if isinstance(text, str):
            fields.append(text)
    citations = payload.get("citations")
    for citation in citations if isinstance(citations, list) else []:
        locator = citation.get("locator") if isinstance(citation, dict) else None
        value = locator.get("value") if isinstance(locator, dict) else None
        if isinstance(value, str):
            fields.append(value)
    return fields


def _strings(value: JsonValue) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


__all__ = [
    "MAX_ARGUMENTS_BYTES",
    "MUTATING_TOOLS",
    "ParsedArguments",
    "ToolName",
    "check_bound_purpose",
    "declared_purpose_ref",
    "decode_arguments",
    "decode_arguments_json",
    "holds_secret",
    "is_mutating",
    "parse_arguments",
    "validate_arguments",
]
