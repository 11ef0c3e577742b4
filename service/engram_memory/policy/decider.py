"""Typed policy decisions over any `PolicyEngine`, each with a receipt.

Every entrypoint result is parsed strictly (closed shapes, exact types, sorted unique
lists); anything else is `PolicyUnavailable`. A decision from a bundle revision the
`RevisionTrust` does not vouch for is `PolicyStale`, and so is one from another revision
than an earlier decision of the same call (`one_revision_per_call`: a call whose decisions
straddle a rollout decides nothing). Denials are values (`allow=False`), never exceptions;
the decider never fails open: an unexpected failure anywhere in evaluation is `PolicyUnavailable`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import (
    ValidationError,
)

from engram_memory.contract.canonical import canonical_json, normalize
from engram_memory.contract.exceptions import PolicyStale, PolicyUnavailable

# The inputs and answers of decisions live in decisions.py; re-exported, since callers take
# them together with the decider.
from engram_memory.policy.decisions import (
    AdmissionCandidate as AdmissionCandidate,
)
from engram_memory.policy.decisions import (
    AdmissionResult as AdmissionResult,
)
from engram_memory.policy.decisions import (
    AllowResult as AllowResult,
)
from engram_memory.policy.decisions import (
    ApprovalResult as ApprovalResult,
)
from engram_memory.policy.decisions import (
    AuthzResult as AuthzResult,
)
from engram_memory.policy.decisions import (
    ClassifierFacts as ClassifierFacts,
)
from engram_memory.policy.decisions import (
    ConfirmationRequirement as ConfirmationRequirement,
)
from engram_memory.policy.decisions import (
    DiscoveryResult as DiscoveryResult,
)
from engram_memory.policy.decisions import (
    RateLimit as RateLimit,
)
from engram_memory.policy.decisions import (
    Redaction as Redaction,
)
from engram_memory.policy.decisions import (
    RetentionResult as RetentionResult,
)
from engram_memory.policy.decisions import (
    Subject as Subject,
)
from engram_memory.policy.engine import BundleIdentity, EngineAnswer, PolicyEngine
from engram_memory.policy.parsed_results import ParsedResults
from engram_memory.policy.receipts import Decision, mint_receipt
from engram_memory.policy.result_shapes import (
    AdmissionShape,
    AdmissionUnconfiguredShape,
    AllowShape,
    ApprovalShape,
    AuthzShape,
    ConfirmationShape,
    DiscoveryShape,
    ResultShape,
    RetentionShape,
)
from engram_memory.policy.revision_trust import (
    PinnedRevision,
    RevisionListener,
    RevisionTrust,
    bind_call_revision,
    call_revision,
    one_revision_per_call,
)

DISCOVERY_PATH = "engram/discovery/decision"
AUTHZ_PATH = "engram/authz/decision"
CONFIRMATION_PATH = "engram/confirmation/decision"
RETENTION_PATH = "engram/retention/decision"
RECONCILIATION_PATH = "engram/reconciliation/decision"
SEMANTIC_PATH = "engram/semantic/decision"
ADMISSION_PATH = "engram/admission/decision"
MAINTENANCE_PATH = "engram/maintenance/decision"

# SPEC §4.4: an admission decision older than this (or from the future) is stale.
ADMISSION_MAX_AGE_MS = 300_000


_R = TypeVar("_R", bound=ResultShape)


def _with_classifiers(
    policy_input: dict[str, Any], classifiers: ClassifierFacts | None
) -> dict[str, Any]:
    """The input with the classifier names (only when the scope classifies: an input
    without classifiers, and its receipt digest, stay as they were)."""
    if classifiers is not None:
        policy_input["classifiers"] = {kind: list(names) for kind, names in classifiers.items()}
    return policy_input


class PolicyDecider:
    """Asks `engine` for each kind of decision, from a revision `trust` vouches for.

    A plain `BundleIdentity` pins that one revision (`PinnedRevision`).
    """

    def __init__(
        self,
        engine: PolicyEngine,
        trust: RevisionTrust | BundleIdentity,
        clock_ms: Callable[[], int],
    ) -> None:
        self._engine = engine
        self._trust: RevisionTrust = (
            PinnedRevision(trust) if isinstance(trust, BundleIdentity) else trust
        )
        self._clock_ms = clock_ms
        self._parsed = ParsedResults()

    @property
    def expected(self) -> BundleIdentity:
        """The identity the running call's decisions bound, else the one in use."""
        return call_revision() or self._trust.current

    def follow_revisions(self, listener: RevisionListener | None) -> None:
        """Hand every change of the revision in use to `listener` before it decides."""
        self._trust.follow(listener)

    def one_revision_per_call(self) -> contextlib.AbstractContextManager[None]:
        """Within the block (one call, on its own thread), every decision must come from
        the revision of the first; `expected` is that revision."""
        return one_revision_per_call()

    def _evaluate(
        self, path: str, policy_input: dict[str, Any]
    ) -> tuple[EngineAnswer, BundleIdentity]:
        try:
            answer = self._engine.evaluate(path, policy_input)
        except (PolicyUnavailable, PolicyStale):
            raise
        # An engine must map its own failures; anything that slips through still must not
        # turn into an allow or crash the call (SPEC §5: policy engine -> POLICY_UNAVAILABLE).
        except Exception as exc:
            raise PolicyUnavailable(f"engine raised {type(exc).__name__}") from exc
        if not isinstance(answer, EngineAnswer):
            raise PolicyUnavailable("engine returned no answer")
        if not isinstance(answer.revision, str):
            raise PolicyUnavailable(f"{path}: engine reported no revision")
        identity = self._trust.identity_for(answer.revision)
        bind_call_revision(identity, path)
        if not isinstance(answer.result, Mapping):
            raise PolicyUnavailable(f"{path}: result is not an object")
        return answer, identity

    def _parse(
        self,
        path: str,
        policy_input: dict[str, Any],
        trusted: tuple[EngineAnswer, BundleIdentity],
        model: type[_R],
    ) -> tuple[_R, Decision]:
        answer, identity = trusted
        result = answer.result
        assert isinstance(result, Mapping)  # checked by _evaluate
        try:
            # Serialized once: for the receipt's digests and for the kept decision; a result
            # the engine answered before is parsed and serialized once (parsed_results.py).
            parsed, result_json = self._parsed.derive(
                path, model, result, answer.result_text, model.model_validate
            )
            input_json = canonical_json(normalize(dict(policy_input)))
            receipt = mint_receipt(
                policy_path=path,
                input_json=input_json,
                result=result,
                result_json=result_json,
                bundle_revision=identity.revision,
                # The digest of the bundle verified for this revision (`_evaluate`).
                bundle_digest=identity.digest,
                engine_id=self._engine.engine_id,
                engine_version=self._engine.engine_version,
                decided_at_ms=self._clock_ms(),
            )
        except (ValidationError, ValueError, TypeError) as exc:
            raise PolicyUnavailable(f"{path}: malformed result") from exc
        return parsed, Decision(
            path=path,
            result=result,
            receipt=receipt,
            policy_input=policy_input,
            input_json=input_json.decode("utf-8"),
            result_json=result_json.decode("utf-8"),
        )

    def _decide(
        self, path: str, policy_input: dict[str, Any], model: type[_R]
    ) -> tuple[_R, Decision]:
        return self._parse(path, policy_input, self._evaluate(path, policy_input), model)

    def discovery(self, subject: Subject, host_memory_enabled: bool) -> DiscoveryResult:
        """Which tools `tools/list` shows this subject.

        Raises:
            PolicyUnavailable, PolicyStale
        """
        policy_input = {**subject.as_input(), "host_memory_enabled": host_memory_enabled}
        parsed, decision = self._decide(DISCOVERY_PATH, policy_input, DiscoveryShape)
        return DiscoveryResult(
            visible_tools=frozenset(parsed.visible_tools),
            never_store_patterns=tuple(parsed.never_store_patterns),
            decision=decision,
            rate_limits=tuple(
                RateLimit(r.name, r.calls, r.per_ms, frozenset(r.tools)) for r in parsed.rate_limits
            ),
            classifiers=tuple(c.model_dump(exclude_none=True) for c in parsed.classifiers),
        )

    def authz(
        self, subject: Subject, tool: str, classifiers: ClassifierFacts | None = None
    ) -> AuthzResult:
        """May the subject call `tool`, with which redaction and response ceiling
        (`classifiers`: for search and get in a scope that classifies, the names that matched
        the record the redaction is for, `{}` before any record is opened).

        Raises:
            PolicyUnavailable, PolicyStale
        """
        policy_input = _with_classifiers({**subject.as_input(), "tool": tool}, classifiers)
        parsed, decision = self._decide(AUTHZ_PATH, policy_input, AuthzShape)
        redaction = Redaction(
            mode=parsed.redaction.mode,
            allowed_fields=tuple(parsed.redaction.allowed_fields),
            allow_derivation_lineage=parsed.redaction.allow_derivation_lineage,
            max_packet_bytes=parsed.redaction.max_packet_bytes,
        )
        return AuthzResult(
            allow=parsed.allow,
            redaction=redaction,
            response_ceiling_bytes=parsed.response_ceiling_bytes,
            decision=decision,
        )

    def confirmation(
        self, subject: Subject, tool: str, classifiers: ClassifierFacts | None = None
    ) -> ConfirmationRequirement:
        """Does calling `tool` need a host confirmation, and its TTL (`classifiers`: what
        the call's content classifiers found, when the scope has any).

        Raises:
            PolicyUnavailable, PolicyStale
        """
        policy_input = _with_classifiers({**subject.as_input(), "tool": tool}, classifiers)
        parsed, decision = self._decide(CONFIRMATION_PATH, policy_input, ConfirmationShape)
        return ConfirmationRequirement(
            required=parsed.required, ttl_seconds=parsed.ttl_seconds, decision=decision
        )

    def approval(
        self,
        subject: Subject,
        tool: str,
        approver: str,
        approver_groups: Sequence[str] | None,
    ) -> ApprovalResult:
        """May `approver` (with the groups the host asserted, None: none asserted) approve
        the subject's call of `tool` (four-eyes). The subject's principal is the requester.

        Raises:
            PolicyUnavailable: also when the result carries no approval (a bundle that
                does not decide approvals approves nothing).
            PolicyStale
        """
        approval: dict[str, Any] = {"approver": approver}
        if approver_groups is not None:
            approval["approver_groups"] = list(approver_groups)
        policy_input = {**subject.as_input(), "tool": tool, "approval": approval}
        parsed, decision = self._decide(CONFIRMATION_PATH, policy_input, ApprovalShape)
        return ApprovalResult(
            approved=parsed.approved, refused_by=tuple(parsed.refused_by), decision=decision
        )

    def retention(
        self,
        subject: Subject,
        capture_instant_ms: int,
        derivative_rule: str,
        expires_at_ms: int | None,
        classifiers: ClassifierFacts | None = None,
    ) -> RetentionResult:
        """Resolve a capture's retention once (SPEC §11).

        Raises:
            PolicyUnavailable: also when an allowed result does not echo a given expiry.
            PolicyStale
        """
        retention: dict[str, Any] = {"derivative_rule": derivative_rule}
        if expires_at_ms is not None:
            retention["expires_at_ms"] = expires_at_ms
        policy_input = {
            **subject.as_input(),
            "capture_instant_ms": capture_instant_ms,
            "retention": retention,
        }
        _with_classifiers(policy_input, classifiers)
        parsed, decision = self._decide(RETENTION_PATH, policy_input, RetentionShape)
        if parsed.allow and expires_at_ms is not None and parsed.expires_at_ms != expires_at_ms:
            raise PolicyUnavailable("retention: allowed result does not echo expires_at_ms")
        return RetentionResult(
            allow=parsed.allow,
            expires_at_ms=parsed.expires_at_ms if parsed.allow else None,
            decision=decision,
        )

    def reconciliation(self, subject: Subject, family_refs: Sequence[str]) -> AllowResult:
        """Are all `family_refs` consented.

        Raises:
            PolicyUnavailable, PolicyStale
        """
        policy_input = {**subject.as_input(), "family_refs": list(family_refs)}
        parsed, decision = self._decide(RECONCILIATION_PATH, policy_input, AllowShape)
        return AllowResult(allow=parsed.allow, decision=decision)

    def semantic_channel(self, subject: Subject) -> AllowResult:
        """May this binding's searches use the semantic channel (SPEC §10.2)? Default: no.

        Raises:
            PolicyUnavailable, PolicyStale
        """
        parsed, decision = self._decide(SEMANTIC_PATH, subject.as_input(), AllowShape)
        return AllowResult(allow=parsed.allow, decision=decision)

    def maintenance(
        self, tenant: str, workspace: str, operator: str, authority: str, operation: str
    ) -> AllowResult:
        """May host operator `operator` use `authority` (read|maintain) for `operation` here.

        Raises:
            PolicyUnavailable, PolicyStale
        """
        policy_input = {
            "tenant": tenant,
            "workspace": workspace,
            "operator": operator,
            "authority": authority,
            "operation": operation,
        }
        parsed, decision = self._decide(MAINTENANCE_PATH, policy_input, AllowShape)
        return AllowResult(allow=parsed.allow, decision=decision)

    def admission(
        self,
        subject: Subject,
        candidate: AdmissionCandidate,
        now_ms: int,
        classifiers: ClassifierFacts | None = None,
    ) -> AdmissionResult:
        """Accept, reject or adjudicate a pending candidate (SPEC §4.4).

        Raises:
            PolicyUnavailable: no admission policy; a malformed decision; an unbound decision
                (its record_digest is not the candidate's).
            PolicyStale: another bundle revision (so another policy id/version than the
                loaded one); `issued_at_ms` in the future or older than 300,000 ms.
        """
        policy_input = {
            **subject.as_input(),
            "now_ms": now_ms,
            "candidate": candidate.model_dump(mode="json"),
        }
        _with_classifiers(policy_input, classifiers)
        trusted = self._evaluate(ADMISSION_PATH, policy_input)
        result = trusted[0].result
        assert isinstance(result, Mapping)  # checked by _evaluate
        if result.get("decision") == "unconfigured":
            # Parsed anyway so a malformed "unconfigured" is reported as malformed.
            self._parse(ADMISSION_PATH, policy_input, trusted, AdmissionUnconfiguredShape)
            raise PolicyUnavailable("admission: no admission policy")
        parsed, decision = self._parse(ADMISSION_PATH, policy_input, trusted, AdmissionShape)
        now = self._clock_ms()
        # SPEC §4.4 step 3: a decision about another record is unbound, not stale: no fresher
        # answer from this policy would bind it, so it is the policy that is unusable.
        if parsed.record_digest != candidate.record_digest:
            raise PolicyUnavailable("admission: decision not bound to the candidate's record")
        if parsed.issued_at_ms > now or now - parsed.issued_at_ms > ADMISSION_MAX_AGE_MS:
            raise PolicyStale("admission: decision issued outside the freshness window")
        return AdmissionResult(
            decision=parsed.decision,
            policy_id=parsed.policy_id,
            policy_version=parsed.policy_version,
            record_digest=parsed.record_digest,
            issued_at_ms=parsed.issued_at_ms,
            receipt=decision,
        )
