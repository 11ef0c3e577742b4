"""Output values of the six tools (SPEC §4.1–§4.6, §10.3), as models and JSON Schemas.

The tools build plain dicts; these models fix the published `outputSchema` and let tests (and
a debug check) validate what the tools return. Optional fields (`next_page_cursor`,
`record_id`, `coverage_receipt_digest`) are omitted when absent, never `null`.

A `record` is whatever survives redaction (SPEC §4.1): every member but `record_id` may be
missing, and a pointer such as `/valid_time/t` may leave a nested object partial. So nested
record members are typed only as objects or arrays; the top level is closed to the record
shape of SPEC §9.3.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from engram_memory.contract.types import (
    AdmissionStatus,
    CandidateId,
    CaptureStatus,
    ClosedModel,
    Digest,
    EpochMillis,
    ForgettableState,
    Instant,
    JournalCursor,
    PageCursor,
    ProgressStatus,
    RankingProfile,
    RecordId,
    ToolName,
)

JsonObject = dict[str, Any]
NonNegative = Annotated[int, Field(ge=0)]


class RecordView(ClosedModel):
    """A record as disclosed under redaction; only `record_id` is always present."""

    schema_version: int | None = None
    scope_ref: str | None = None
    purpose_ref: str | None = None
    valid_time: JsonObject | None = None
    components: list[JsonObject] | None = None
    primary_component_id: str | None = None
    primary_event: JsonObject | None = None
    citations: list[JsonObject] | None = None
    retention: JsonObject | None = None
    reconciliation: JsonObject | None = None
    derivation: JsonObject | None = None
    payload_digest: Digest | None = None
    recorded_at: Instant | None = None
    recorded_cursor: JournalCursor | None = None
    authorization_receipt_digest: Digest | None = None
    trust: JsonObject | None = None
    record_digest: Digest | None = None
    record_id: RecordId


class _Packet(ClosedModel):
    record: RecordView
    redacted_fields: Annotated[
        list[str], Field(description="Top-level JSON Pointers withheld by redaction, sorted.")
    ]
    redaction_receipt_digest: Digest


class SearchPacket(_Packet):
    """One ranked record."""

    score: float
    rank: Annotated[int, Field(ge=1, description="1-based position in the whole ranked list.")]


class RankReceipt(ClosedModel):
    """How the ranking was produced (SPEC §10.3)."""

    request_digest: Digest
    authorization_receipt_digest: Digest
    profile: RankingProfile
    profile_version: str
    profile_config_digest: Digest
    valid_as_of: EpochMillis
    system_as_of: JournalCursor
    snapshot_id: str
    snapshot_digest: Digest
    candidate_count: NonNegative
    candidate_ids_digest: Digest
    scoring_formula_ref: str
    ordered_ids_digest: Digest
    revalidation_receipt_digest: Digest
    projection_receipt_digests: list[Digest]
    issued_at: Instant
    receipt_digest: Digest


class SearchOutput(ClosedModel):
    """Value of a successful `engram_memory_search`."""

    records: list[SearchPacket]
    rank_receipt: RankReceipt
    next_page_cursor: PageCursor | None = None
    response_digest: Digest


class ReadReceipt(ClosedModel):
    """What `engram_memory_get` checked, and when (SPEC §4.2)."""

    record_id: RecordId
    record_digest: Digest
    valid_as_of: EpochMillis
    system_as_of: JournalCursor
    validated_through_cursor: JournalCursor
    authorization_receipt_digest: Digest
    revalidation_receipt_digest: Digest
    checked_at: Instant
    receipt_digest: Digest


class GetOutput(_Packet):
    """Value of a successful `engram_memory_get`."""

    read_receipt: ReadReceipt
    packet_digest: Digest


class CaptureOutput(ClosedModel):
    """Value of a successful `engram_memory_capture`."""

    status: CaptureStatus
    candidate_id: CandidateId
    record_digest: Digest
    cursor: JournalCursor
    transaction_receipt_digest: Digest


class AdmissionOutcome(ClosedModel):
    """The admission result; `record_id` only when `accepted`."""

    status: AdmissionStatus
    candidate_id: CandidateId
    record_id: RecordId | None = None
    cursor: JournalCursor
    decision_receipt_digest: Digest
    transaction_receipt_digest: Digest


class RequestAdmissionOutput(ClosedModel):
    """Value of a successful `engram_memory_request_admission`."""

    outcome: AdmissionOutcome
    replayed: bool


class _TransitionReceipt(ClosedModel):
    event_id: str
    cursor: JournalCursor
    event_digest: Digest
    authorization_receipt_digest: Digest
    transaction_receipt_digest: Digest


class WithdrawReceipt(_TransitionReceipt):
    """The journaled withdraw transition."""

    operation: Literal["withdraw"]
    from_state: Literal["pending"]
    to_state: Literal["withdrawn"]


class WithdrawOutput(ClosedModel):
    """Value of a successful `engram_memory_withdraw`."""

    receipt: WithdrawReceipt
    replayed: bool
    key_destruction: ProgressStatus


class ForgetReceipt(_TransitionReceipt):
    """The journaled tombstone transition."""

    operation: Literal["tombstone"]
    from_state: ForgettableState
    to_state: Literal["tombstoned"]


class ForgetOutput(ClosedModel):
    """Value of a successful `engram_memory_forget`; coverage only once invalidation is done."""

    receipt: ForgetReceipt
    replayed: bool
    projection_invalidation: ProgressStatus
    coverage_receipt_digest: Digest | None = None


ToolOutput = (
    SearchOutput
    | GetOutput
    | CaptureOutput
    | RequestAdmissionOutput
    | WithdrawOutput
    | ForgetOutput
)

OUTPUT_MODELS: Mapping[ToolName, type[ToolOutput]] = {
    ToolName.SEARCH: SearchOutput,
    ToolName.GET: GetOutput,
    ToolName.CAPTURE: CaptureOutput,
    ToolName.REQUEST_ADMISSION: RequestAdmissionOutput,
    ToolName.WITHDRAW: WithdrawOutput,
    ToolName.FORGET: ForgetOutput,
}


def validate_output(tool: ToolName, value: Mapping[str, Any]) -> ToolOutput:
    """Check a tool's output value against its published contract (tests, debug builds).

    Raises:
        pydantic.ValidationError: the value does not match the output schema.
    """
    return OUTPUT_MODELS[ToolName(tool)].model_validate(value)
