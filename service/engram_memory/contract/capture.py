"""The capture input (SPEC §4.3): payload, evidence and their cross-references.

Every object is closed and strict. Fields the agent may not set (`scope_ref`, `derivation`,
the writer fields) are simply not declared, so they fail as unknown properties. Cross-reference
failures raise their own error types (`cross_reference`, `not_distinct`, `not_ascending`,
`time_order`), all INVALID_SCHEMA.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.types import (
    Attestation,
    ClosedModel,
    ComponentKind,
    DerivativeRule,
    Digest,
    EpochMillis,
    IdempotencyKey,
    Instant,
    LocatorPart,
    Ref,
    Text,
    parse_instant,
)

CROSS_REFERENCE_ERROR = "cross_reference"
DISTINCT_ERROR = "not_distinct"
ORDER_ERROR = "not_ascending"
TIME_ORDER_ERROR = "time_order"


def _distinct(values: list[str]) -> list[str]:
    if len(set(values)) != len(values):
        raise PydanticCustomError(DISTINCT_ERROR, "List entries must be distinct")
    return values


def utf16_key(text: str) -> bytes:
    """Sort key ordering strings by UTF-16 code units, as JavaScript and RFC 8785 compare."""
    return text.encode("utf-16-be", "surrogatepass")


def _strictly_ascending(values: list[str]) -> list[str]:
    keys = [utf16_key(v) for v in values]
    if any(a >= b for a, b in pairwise(keys)):
        raise PydanticCustomError(
            ORDER_ERROR, "Entries must be strictly ascending by UTF-16 code units"
        )
    return values


CitationIds = Annotated[
    list[Ref],
    Field(
        min_length=1,
        max_length=256,
        json_schema_extra={"uniqueItems": True},
        description="1..256 distinct citation ids, each present in payload.citations.",
    ),
    AfterValidator(_distinct),
]


class ValidTime(ClosedModel):
    """Valid-time interval in epoch milliseconds; no `t_end` means open-ended."""

    t: EpochMillis
    t_end: EpochMillis | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ValidTime:
        if self.t_end is not None and self.t_end < self.t:
            raise PydanticCustomError(TIME_ORDER_ERROR, "t_end must not precede t")
        return self


class Component(ClosedModel):
    """One piece of the memory, citing the sources it rests on."""

    component_id: Ref
    kind: ComponentKind
    text: Text
    citation_ids: CitationIds


class PrimaryEvent(ClosedModel):
    """The event the memory is about."""

    at: EpochMillis
    type_ref: Ref
    citation_id: Ref


class Locator(ClosedModel):
    """Where in the source the cited content sits."""

    scheme: LocatorPart
    value: LocatorPart


class Citation(ClosedModel):
    """A source assertion; `content_digest` is checked for format only."""

    citation_id: Ref
    source_ref: Ref
    locator: Locator
    content_digest: Digest
    observed_at: Instant | None = None


class Retention(ClosedModel):
    """Omit unless instructed; `retain` and `expires_at` are subject to policy."""

    derivative_rule: DerivativeRule
    expires_at: Instant | None = None


class Reconciliation(ClosedModel):
    """Reconciliation families; non-empty needs host consent for every family."""

    family_refs: Annotated[
        list[Ref],
        Field(
            min_length=0,
            max_length=64,
            json_schema_extra={"uniqueItems": True},
            description="0..64 refs, strictly ascending by UTF-16 code units.",
        ),
        AfterValidator(_strictly_ascending),
    ]


class CapturePayload(ClosedModel):
    """The memory content as the agent submits it (schema version 2)."""

    schema_version: Literal[2]
    purpose_ref: Ref
    valid_time: ValidTime
    components: Annotated[list[Component], Field(min_length=1, max_length=64)]
    primary_component_id: Ref
    primary_event: PrimaryEvent
    citations: Annotated[list[Citation], Field(min_length=1, max_length=256)]
    retention: Retention | None = None
    reconciliation: Reconciliation | None = None

    @model_validator(mode="after")
    def _cross_references(self) -> CapturePayload:
        citation_ids = [c.citation_id for c in self.citations]
        if len(set(citation_ids)) != len(citation_ids):
            raise _xref("citation ids are not unique")
        component_ids = [c.component_id for c in self.components]
        if len(set(component_ids)) != len(component_ids):
            raise _xref("component ids are not unique")
        known = set(citation_ids)
        if any(cid not in known for c in self.components for cid in c.citation_ids):
            raise _xref("a component cites an unknown citation")
        primary = next(
            (c for c in self.components if c.component_id == self.primary_component_id), None
        )
        if primary is None:
            raise _xref("primary_component_id names no component")
        event_citation = self.primary_event.citation_id
        if event_citation not in known or event_citation not in primary.citation_ids:
            raise _xref("primary_event.citation_id is not cited by the primary component")
        return self


class Evidence(ClosedModel):
    """The agent's evidence for the capture; assertions until a host verifier checks them."""

    evidence_ref: Ref
    evidence_digest: Digest
    citation_ids: CitationIds
    attestation: Attestation | None = None


class CaptureInput(ClosedModel):
    """Arguments of `engram_memory_capture`."""

    idempotency_key: IdempotencyKey
    payload: CapturePayload
    evidence: Evidence

    @model_validator(mode="after")
    def _evidence_resolves(self) -> CaptureInput:
        known = {c.citation_id for c in self.payload.citations}
        if any(cid not in known for cid in self.evidence.citation_ids):
            raise _xref("evidence cites an unknown citation")
        return self


def _xref(what: str) -> PydanticCustomError:
    # `what` is a constant of this module, never input text.
    return PydanticCustomError(CROSS_REFERENCE_ERROR, "{what}", {"what": what})


def check_capture_time_rules(capture: object, capture_instant_ms: int) -> None:
    """Rules that need the server clock: `expires_at` strictly after the capture instant.

    The capture instant is the one that also becomes `recorded_at` (SPEC §4.3). `capture`
    is typed loosely so that `ParsedArguments.model` can be passed as is.

    Raises:
        ToolError: INVALID_SCHEMA when `payload.retention.expires_at` is not after it.
        TypeError: `capture` is not a `CaptureInput` (a programming error).
    """
    if not isinstance(capture, CaptureInput):
        raise TypeError("check_capture_time_rules needs a CaptureInput")
    retention = capture.payload.retention
    if retention is None or retention.expires_at is None:
        return
    if parse_instant(retention.expires_at) <= capture_instant_ms:
        raise ToolError(ErrorCode.INVALID_SCHEMA, "payload.retention.expires_at:not_after_capture")
