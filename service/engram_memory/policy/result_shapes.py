"""The closed shape of every policy entrypoint's result, as the decider accepts it.

Anything the Rego modules return that does not fit exactly (extra keys, wrong types, unsorted
or duplicate lists, out-of-range numbers) is refused by the decider as `PolicyUnavailable`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from engram_memory.contract.types import ToolName

_SAFE_INT_MAX = 2**53 - 1
_TOOL_NAMES = frozenset(ToolName)


def _sorted_unique(values: list[str]) -> list[str]:
    if values != sorted(set(values)):
        raise ValueError("must be sorted and unique")
    return values


SortedStrings = Annotated[list[str], AfterValidator(_sorted_unique)]
Reasons = Annotated[list[Annotated[str, StringConstraints(min_length=1)]], Field(min_length=1)]
ReasonList = Annotated[Reasons, AfterValidator(_sorted_unique)]
Pointer = Annotated[str, StringConstraints(pattern=r"^(|/([^~]|~[01])*)$")]
Millis = Annotated[int, Field(ge=0, le=_SAFE_INT_MAX)]


def _known_tools(values: list[str]) -> list[str]:
    if not set(values) <= set(_TOOL_NAMES):
        raise ValueError("unknown tool")
    return values


class ResultShape(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RateLimitShape(ResultShape):
    name: Annotated[str, StringConstraints(min_length=1)]
    calls: Annotated[int, Field(ge=1, le=1_000_000)]
    per_ms: Annotated[int, Field(ge=1, le=_SAFE_INT_MAX)]
    # The tools the rule counts; none: every tool.
    tools: Annotated[list[str], AfterValidator(_known_tools)]


class ClassifierShape(BaseModel):
    """A content classifier definition as policy data compiles it (contract/classifiers.py
    compiles it again and refuses what it cannot run)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: Annotated[str, StringConstraints(min_length=1)]
    kinds: SortedStrings | None = None
    terms: SortedStrings | None = None
    case_sensitive: bool | None = None
    whole_words: bool | None = None
    regex: str | None = None
    detector: str | None = None
    region: str | None = None


class DiscoveryShape(ResultShape):
    visible_tools: Annotated[SortedStrings, AfterValidator(_known_tools)]
    never_store_patterns: SortedStrings
    rate_limits: list[RateLimitShape]
    reasons: ReasonList
    # Only when the scope defines some (so every other result keeps its shape).
    classifiers: list[ClassifierShape] = []


class RedactionShape(ResultShape):
    mode: Literal["field-allowlist"]
    allowed_fields: Annotated[list[Pointer], AfterValidator(_sorted_unique)]
    allow_derivation_lineage: bool
    max_packet_bytes: Annotated[int, Field(ge=4096, le=1_048_576)]


class AuthzShape(ResultShape):
    allow: bool
    redaction: RedactionShape
    response_ceiling_bytes: Annotated[int, Field(ge=4096, le=67_108_864)]
    reasons: ReasonList


class ConfirmationShape(ResultShape):
    required: bool
    ttl_seconds: Annotated[int, Field(ge=1, le=300)]
    reasons: ReasonList


class ApprovalShape(ConfirmationShape):
    """The confirmation decision asked with approval facts (four-eyes): both keys must be
    there, so a bundle that does not decide approvals approves nothing."""

    approved: bool
    refused_by: SortedStrings


class RetentionShape(ResultShape):
    allow: bool
    expires_at_ms: Millis | None = None
    reasons: ReasonList


class AllowShape(ResultShape):
    """The shape of reconciliation and maintenance decisions."""

    allow: bool
    reasons: ReasonList


class AdmissionUnconfiguredShape(ResultShape):
    decision: Literal["unconfigured"]
    reasons: ReasonList


class AdmissionShape(ResultShape):
    decision: Literal["accept", "reject", "adjudication_required"]
    policy_id: Annotated[str, StringConstraints(min_length=1)]
    policy_version: Annotated[str, StringConstraints(min_length=1)]
    record_digest: str
    issued_at_ms: Millis
    reasons: ReasonList
