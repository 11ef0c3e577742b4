"""The part of an imported line's work that depends only on the line (bulk/importer.py).

A line is a capture, then an admission. Of each call, everything before the store is asked
anything depends only on the line and the binding: the argument checks and never-store scan,
the classifiers, the confirmation, authorization, retention and reconciliation decisions
(each with its own receipt), the effective payload, the candidate's envelope sealed under a
new key, and, for the admission, its argument checks and decisions and the record's index
terms. `LineWork.prepare` runs exactly those steps, through the tools' own functions
(tools/dispatch.py `parse_call`, tools/capture.py `guard` / `plan`, core/steps.py
`guard_mutation`), in a worker process (bulk/pool.py) or in the importer's own.

What needs the store or the line order stays with the importer, in input order: the rate
limits (counted where the tool counts them: `DeferredRateLimits` only notes what was asked),
the idempotency lookups, the cursors, the record (its id and digest bind the capture
cursor), the admission decision (its input names the record digest), the hash chains and
the audit entries. Given the cursor the importer guesses the capture will take, a worker
also builds the record there and asks the admission policy about it
(bulk/admission_guess.py); the importer uses both only if the capture lands there. A
line's steps after the lookup are taken speculatively: when the lookup
finds a stored result, the tool would not have taken them, so the importer keeps only the
facts gathered up to the lookup (`upto`) and drops the rest; a receipt minted and dropped
is never written anywhere.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engram_memory.bulk.admission_guess import GuessedAdmission, guessed
from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.classifiers import EMPTY_SET, ClassifierSet, texts_by_kind
from engram_memory.contract.exceptions import ProtocolRefusal, ToolError
from engram_memory.contract.types import ToolName
from engram_memory.core import indexing, steps
from engram_memory.core.call_audit import AuditFacts, CallAudit, ToolOutcome, refusal_outcome
from engram_memory.core.rate_limits import RateLimiter
from engram_memory.core.runtime import CallContext, Services
from engram_memory.crypto.sealing import new_data_key, seal
from engram_memory.host.context import InvocationContext
from engram_memory.policy.decider import ClassifierFacts, RateLimit
from engram_memory.tools import capture
from engram_memory.tools.dispatch import parse_call

CAPTURE = ToolName.CAPTURE
ADMIT = ToolName.REQUEST_ADMISSION
IMPORT_HOST = "host:import"


@dataclass(frozen=True)
class ImportBinding:
    """The scope and caller every line is bound to, as a host binds an agent's call."""

    tenant: str
    workspace: str
    principal: str
    purpose_ref: str
    # Every line's audit entries carry it (as session_ref); the CLI uses the session of the
    # operator's `admin:import` entry, so an auditor finds a run's lines from that entry.
    session: str


def context(
    services: Services, binding: ImportBinding, tool: str, label: str, now_ms: int
) -> CallContext:
    """The context of one of a line's calls, bound as a host binds an agent's call."""
    invocation = InvocationContext(
        host_id=IMPORT_HOST,
        tenant=binding.tenant,
        workspace=binding.workspace,
        principal=binding.principal,
        agent_id=IMPORT_HOST,
        session=binding.session,
        purpose_ref=binding.purpose_ref,
        audit_id=f"{binding.session}:{label}",
        issued_at_s=now_ms // 1000,
        expires_at_s=now_ms // 1000 + 300,
    )
    return CallContext(services, invocation, tool, now_ms)


@dataclass(frozen=True)
class Refused:
    """A refused call: its audit outcome (a code) and the facts of its entry."""

    outcome: str
    facts: AuditFacts


def refused(refusal: ToolError | ProtocolRefusal, audit: CallAudit) -> Refused:
    return Refused(refusal_outcome(refusal), ToolOutcome.failed(refusal, audit).facts)


def upto(audit: CallAudit, decisions: int, targets: int, *, keyed: bool = True) -> CallAudit:
    """The facts `audit` held when it had made `decisions` decisions and named `targets`
    targets (and knew its key digest, if `keyed`): what the tool's call held at that step."""
    earlier = CallAudit()
    for decision in audit.decisions[:decisions]:
        earlier.decided(decision)
    for target in audit.target_ids[:targets]:
        earlier.targets(target)
    if keyed and audit.idempotency_key_digest:
        earlier.keyed(audit.idempotency_key_digest)
    return earlier


class DeferredRateLimits(RateLimiter):
    """Admits every call, noting which limits it was asked about and how many decisions the
    call had made then: the importer counts the line against them in input order."""

    def __init__(self) -> None:
        super().__init__()
        self.audit: CallAudit | None = None
        self.asked: tuple[tuple[RateLimit, ...], int] | None = None

    def watch(self, audit: CallAudit) -> None:
        self.audit, self.asked = audit, None

    def admit(
        self, scope_ref: str, principal: str, limits: Sequence[RateLimit], now_ms: int
    ) -> str | None:
        made = 0 if self.audit is None else len(self.audit.decisions)
        self.asked = (tuple(limits), made)
        return None


@dataclass(frozen=True)
class PreparedCall:
    """One call's line-only steps: where the rate limits are counted (`limits`, None when
    it was refused before), the facts gathered, and its refusal if one of them refused it."""

    limits: tuple[tuple[RateLimit, ...], int] | None
    audit: CallAudit
    refusal: Refused | None
    mutation: steps.MutationKey | None
    # Decisions and targets when its idempotency key was known (`upto`).
    at_lookup: tuple[int, int]


@dataclass(frozen=True)
class PreparedCapture:
    call: PreparedCall
    idempotency_key: str  # as parsed ("" when refused before)
    plan_refusal: Refused | None  # retention or reconciliation refused it
    planned: capture.CapturePlan | None
    envelope: dict[str, JsonValue] | None
    sealed: bytes
    data_key: bytes


@dataclass(frozen=True)
class PreparedAdmission:
    call: PreparedCall
    candidate_id: str
    key: str
    classifiers: ClassifierSet
    # Prepared from the line's captured payload: `facts` (the classifier names it matched)
    # and `index` were found from it.
    from_payload: bool
    facts: ClassifierFacts | None
    index: indexing.RecordIndex | None  # its record_id is filled in by the importer
    # The admission decision asked at the cursor guessed for the line's capture (a worker's
    # line with a guess only; bulk/admission_guess.py).
    guess: GuessedAdmission | None = None


@dataclass(frozen=True)
class PreparedLine:
    number: int
    now_ms: int
    lookahead_key: str | None  # the raw arguments' idempotency key, if a string
    capture: PreparedCapture
    admission: PreparedAdmission | None

    @property
    def events(self) -> int:
        """The journal events the line writes if it goes as prepared (no rate limit or
        replay met): what the next line's cursor guess adds to this one's."""
        if self.capture.planned is None:
            return 0
        admitted = self.admission
        if admitted is None or admitted.guess is None:  # the admission is refused
            return 1
        return admitted.guess.events


def admission_key_for(capture_key: str) -> str:
    """The admission's idempotency key of a line: a digest of its capture key, so that a
    rerun of the same file replays the admission too."""
    return "import-admission-" + hashlib.sha256(capture_key.encode()).hexdigest()


def decoded(text: str) -> object:
    """The line's arguments; a line that is not JSON reaches the argument checks as a
    non-object and is refused there (INVALID_SCHEMA), like such arguments from a client."""
    try:
        value: object = json.loads(text)
    except ValueError:
        return None
    return value


class LineWork:
    """Runs the line-only steps with `services` (its rate limiter is replaced)."""

    def __init__(self, services: Services, binding: ImportBinding, *, index_terms: bool) -> None:
        self.limits = DeferredRateLimits()
        self.services = replace(services, rate_limiter=self.limits)
        self.binding = binding
        # False when the importer computes the index itself (a semantic channel follows).
        self.index_terms = index_terms

    def prepare(
        self, number: int, text: str, now_ms: int, cursor: int | None = None
    ) -> PreparedLine:
        """The line's prepared steps; with `cursor`, the cursor its capture is guessed to
        take, also its admission decision at that cursor."""
        raw = decoded(text)
        key = raw.get("idempotency_key") if isinstance(raw, dict) else None
        prepared = self._capture(number, raw, now_ms)
        admission = None
        if prepared.planned is not None and prepared.envelope is not None:
            admission = self.admission(
                number,
                prepared.planned.candidate_id,
                admission_key_for(prepared.idempotency_key),
                now_ms,
                prepared.envelope["payload"],
                None if cursor is None else (prepared.planned, prepared.envelope, cursor),
            )
        lookahead = key if isinstance(key, str) else None
        return PreparedLine(number, now_ms, lookahead, prepared, admission)

    def _capture(self, number: int, raw: object, now_ms: int) -> PreparedCapture:
        ctx = context(self.services, self.binding, CAPTURE, f"line-{number}:capture", now_ms)
        audit = CallAudit()
        self.limits.watch(audit)
        try:
            parsed = parse_call(ctx, audit, raw)
            mutation, authz = capture.guard(ctx, audit, parsed, None)
        except (ToolError, ProtocolRefusal) as refusal:
            call = PreparedCall(self.limits.asked, audit, refused(refusal, audit), None, (0, 0))
            return PreparedCapture(call, "", None, None, None, b"", b"")
        call = PreparedCall(
            self.limits.asked, audit, None, mutation, (len(audit.decisions), len(audit.target_ids))
        )
        idempotency_key = str(parsed.arguments["idempotency_key"])
        try:
            planned = capture.plan(ctx, audit, parsed, mutation, authz)
        except (ToolError, ProtocolRefusal) as refusal:
            return PreparedCapture(
                call, idempotency_key, refused(refusal, audit), None, None, b"", b""
            )
        data_key = new_data_key()
        envelope = planned.envelope(ctx)
        sealed = seal(data_key, canonical_json(envelope), ctx.scope_ref, planned.candidate_id)
        return PreparedCapture(call, idempotency_key, None, planned, envelope, sealed, data_key)

    def admission(
        self,
        number: int,
        candidate_id: str,
        key: str,
        now_ms: int,
        payload: Mapping[str, Any] | None,
        guess_at: tuple[capture.CapturePlan, dict[str, JsonValue], int] | None = None,
    ) -> PreparedAdmission:
        """The admission's steps up to its idempotency lookup, as the tool takes them; with
        the captured `payload`, also the classifier names and the record's index terms; with
        `guess_at` (the line's plan, envelope and guessed capture cursor), also the
        admission decision at that cursor."""
        ctx = context(self.services, self.binding, ADMIT, f"line-{number}:admission", now_ms)
        audit = CallAudit()
        self.limits.watch(audit)
        arguments = {"candidate_id": candidate_id, "idempotency_key": key}
        try:
            parsed = parse_call(ctx, audit, arguments)
            audit.targets(candidate_id)
            mutation, _ = steps.guard_mutation(ctx, audit, parsed, None, target=candidate_id)
        except (ToolError, ProtocolRefusal) as refusal:
            call = PreparedCall(self.limits.asked, audit, refused(refusal, audit), None, (0, 0))
            return PreparedAdmission(call, candidate_id, key, EMPTY_SET, False, None, None)
        call = PreparedCall(
            self.limits.asked, audit, None, mutation, (len(audit.decisions), len(audit.target_ids))
        )
        facts = None
        index = None
        if payload is not None:
            classifiers = parsed.classifiers
            facts = classifiers.classify(texts_by_kind(payload)) if classifiers else None
            if self.index_terms:
                # The index terms depend on the payload alone; the record id is the importer's.
                index = indexing.record_index(ctx, {**payload, "record_id": ""})
        guess = None
        if guess_at is not None and payload is not None:
            guess = guessed(ctx, *guess_at, facts)
        return PreparedAdmission(
            call, candidate_id, key, parsed.classifiers, payload is not None, facts, index, guess
        )
