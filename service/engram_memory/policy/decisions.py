"""What policy decisions are about and what they answer, as typed values.

`Subject` (who asks, as the host bound it) and `AdmissionCandidate` (what admission sees of a
candidate) are the inputs; the `...Result` values are the parsed answers `PolicyDecider`
(policy/decider.py) returns, each carrying its receipt. Kept apart from the decider so the
shapes read on their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engram_memory.policy.receipts import Decision


@dataclass(frozen=True, slots=True)
class Subject:
    """Who asks, as bound by the host (never from tool arguments)."""

    tenant: str
    workspace: str
    principal: str
    agent_id: str
    purpose_ref: str
    host_id: str
    # Host-asserted `group:<name>` references, sorted and unique (host/context.py).
    groups: tuple[str, ...] = ()

    def as_input(self) -> dict[str, Any]:
        subject: dict[str, Any] = {
            "tenant": self.tenant,
            "workspace": self.workspace,
            "principal": self.principal,
            "agent_id": self.agent_id,
            "purpose_ref": self.purpose_ref,
            "host_id": self.host_id,
        }
        # Only when present, so every input (and receipt digest) without groups is unchanged.
        if self.groups:
            subject["groups"] = list(self.groups)
        return subject


class AdmissionCandidate(BaseModel):
    """What the admission policy sees of a candidate (never its content)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    candidate_id: str
    payload_digest: str
    record_digest: str
    evidence_ref: str
    evidence_digest: str
    # Lists or tuples (strict mode alone would refuse lists); items must still be strings.
    component_kinds: tuple[str, ...] = Field(strict=False)
    citation_count: Annotated[int, Field(ge=0)]
    source_refs: tuple[str, ...] = Field(strict=False)
    has_attestation: bool
    trust_class: str = "asserted"


# What content classifiers found, as policy sees it: {component kind: [sorted names]}.
ClassifierFacts = dict[str, list[str]]


@dataclass(frozen=True, slots=True)
class DiscoveryResult:
    visible_tools: frozenset[str]
    # Secret shapes policy data adds for this scope (SPEC §11), as regular expressions.
    never_store_patterns: tuple[str, ...]
    decision: Decision
    # The rate-limit rules selecting this subject (SPEC §12); `limits_for` picks a tool's.
    rate_limits: tuple[RateLimit, ...] = ()
    # The scope's content classifier definitions (issue 22), as policy data compiled them.
    classifiers: tuple[dict[str, Any], ...] = ()

    def limits_for(self, tool: str) -> tuple[RateLimit, ...]:
        """The rules that count a call of `tool`."""
        return tuple(limit for limit in self.rate_limits if limit.counts(tool))


@dataclass(frozen=True, slots=True)
class Redaction:
    mode: str
    allowed_fields: tuple[str, ...]
    allow_derivation_lineage: bool
    max_packet_bytes: int


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `calls` calls per `per_ms` milliseconds, counted per caller (SPEC §12)."""

    name: str
    calls: int
    per_ms: int
    # The tools the rule counts; empty: every tool.
    tools: frozenset[str] = frozenset()

    def counts(self, tool: str) -> bool:
        return not self.tools or tool in self.tools


@dataclass(frozen=True, slots=True)
class AuthzResult:
    allow: bool
    redaction: Redaction
    response_ceiling_bytes: int
    decision: Decision


@dataclass(frozen=True, slots=True)
class ConfirmationRequirement:
    required: bool
    ttl_seconds: int
    decision: Decision


@dataclass(frozen=True, slots=True)
class ApprovalResult:
    """May this human approve this principal's call (four-eyes); `refused_by` names the
    approval rules that refused."""

    approved: bool
    refused_by: tuple[str, ...]
    decision: Decision


@dataclass(frozen=True, slots=True)
class RetentionResult:
    allow: bool
    expires_at_ms: int | None
    decision: Decision


@dataclass(frozen=True, slots=True)
class AllowResult:
    """An allow/deny decision (reconciliation consent, maintenance authority)."""

    allow: bool
    decision: Decision


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    decision: Literal["accept", "reject", "adjudication_required"]
    policy_id: str
    policy_version: str
    record_digest: str
    issued_at_ms: int
    receipt: Decision
