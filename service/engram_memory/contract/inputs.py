"""Input models of the six tools (SPEC §4).

Optional fields stay `None` when omitted: defaults are never materialized into the arguments,
because the operation digest is computed over the arguments as received (SPEC §6). The
`effective_*` helpers give the defaults of SPEC §4 to the code that needs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import Field

from engram_memory.contract.capture import (
    CaptureInput,
    CapturePayload,
    Citation,
    Component,
    Evidence,
    Locator,
    PrimaryEvent,
    Reconciliation,
    Retention,
    ValidTime,
    check_capture_time_rules,
    utf16_key,
)
from engram_memory.contract.types import (
    CandidateId,
    ClosedModel,
    IdempotencyKey,
    MinimumChannels,
    NetworkPolicy,
    PageCursor,
    Query,
    RecordId,
    Ref,
    ToolName,
)

DEFAULT_LIMIT = 10
DEFAULT_MAX_PACKET_BYTES = 65_536
MIN_PACKET_BYTES = 4_096
MAX_PACKET_BYTES = 1_048_576

PacketBytes = Annotated[
    int,
    Field(
        ge=MIN_PACKET_BYTES,
        le=MAX_PACKET_BYTES,
        description="Packet byte budget, 4096..1048576; default 65536.",
    ),
]


class CapabilityPolicy(ClosedModel):
    """Ranking capability requirements; both keys are required when present."""

    minimum_channels: MinimumChannels
    network: NetworkPolicy


DEFAULT_CAPABILITY_POLICY = CapabilityPolicy(minimum_channels="lexical", network="forbid")


class SearchInput(ClosedModel):
    """Arguments of `engram_memory_search`."""

    query: Query
    purpose_ref: Ref
    limit: Annotated[int, Field(ge=1, le=50, description="1..50 packets; default 10.")] | None = (
        None
    )
    max_packet_bytes: PacketBytes | None = None
    capability_policy: CapabilityPolicy | None = None
    page_cursor: PageCursor | None = None

    @property
    def effective_limit(self) -> int:
        return DEFAULT_LIMIT if self.limit is None else self.limit

    @property
    def effective_max_packet_bytes(self) -> int:
        return DEFAULT_MAX_PACKET_BYTES if self.max_packet_bytes is None else self.max_packet_bytes

    @property
    def effective_capability_policy(self) -> CapabilityPolicy:
        if self.capability_policy is None:
            return DEFAULT_CAPABILITY_POLICY
        return self.capability_policy


class GetInput(ClosedModel):
    """Arguments of `engram_memory_get`."""

    record_id: RecordId
    purpose_ref: Ref
    max_packet_bytes: PacketBytes | None = None

    @property
    def effective_max_packet_bytes(self) -> int:
        return DEFAULT_MAX_PACKET_BYTES if self.max_packet_bytes is None else self.max_packet_bytes


class RequestAdmissionInput(ClosedModel):
    """Arguments of `engram_memory_request_admission`."""

    candidate_id: CandidateId
    idempotency_key: IdempotencyKey


class WithdrawInput(ClosedModel):
    """Arguments of `engram_memory_withdraw`."""

    candidate_id: CandidateId
    idempotency_key: IdempotencyKey
    reason_ref: Ref


class ForgetInput(ClosedModel):
    """Arguments of `engram_memory_forget`."""

    record_id: RecordId
    idempotency_key: IdempotencyKey
    reason_ref: Ref


ToolInput = (
    SearchInput | GetInput | CaptureInput | RequestAdmissionInput | WithdrawInput | ForgetInput
)

INPUT_MODELS: Mapping[ToolName, type[ToolInput]] = {
    ToolName.SEARCH: SearchInput,
    ToolName.GET: GetInput,
    ToolName.CAPTURE: CaptureInput,
    ToolName.REQUEST_ADMISSION: RequestAdmissionInput,
    ToolName.WITHDRAW: WithdrawInput,
    ToolName.FORGET: ForgetInput,
}

__all__ = [
    "DEFAULT_CAPABILITY_POLICY",
    "DEFAULT_LIMIT",
    "DEFAULT_MAX_PACKET_BYTES",
    "INPUT_MODELS",
    "CapabilityPolicy",
    "CaptureInput",
    "CapturePayload",
    "Citation",
    "Component",
    "Evidence",
    "ForgetInput",
    "GetInput",
    "Locator",
    "PrimaryEvent",
    "Reconciliation",
    "RequestAdmissionInput",
    "Retention",
    "SearchInput",
    "ToolInput",
    "ValidTime",
    "WithdrawInput",
    "check_capture_time_rules",
    "utf16_key",
]
