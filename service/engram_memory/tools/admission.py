"""`engram_memory_request_admission`: the admission policy decides a candidate (SPEC §4.4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.classifiers import ClassifierSet, texts_by_kind
from engram_memory.contract.digests import digest, with_digest
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.contract.types import format_instant
from engram_memory.core import forgotten, indexing, item_keys, steps
from engram_memory.core.admission_outcome import conclude_admission, rebuild_record
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.mutation import Index, Written, commit, commit_new_item
from engram_memory.core.runtime import CallContext
from engram_memory.policy.decider import AdmissionCandidate, AdmissionResult, ClassifierFacts
from engram_memory.store import key_intents, memory
from engram_memory.store.transaction import Transaction

# The audit detail of an admission the policy (or the forget guard) held for adjudication.
HELD_FOR_ADJUDICATION = "held for adjudication"


def _admission_candidate(
    candidate: memory.CandidateRow, envelope: dict[str, Any]
) -> AdmissionCandidate:
    return admission_candidate(
        candidate.candidate_id, candidate.payload_digest, candidate.record_digest, envelope
    )


def admission_candidate(
    candidate_id: str, payload_digest: str, record_digest: str, envelope: dict[str, Any]
) -> AdmissionCandidate:
    """What the admission policy is told of a candidate: its id and digests (the candidate
    row's, which the capture took from its record) and facts of its opened envelope."""
    payload, evidence = envelope["payload"], envelope["evidence"]
    return AdmissionCandidate(
        candidate_id=candidate_id,
        payload_digest=payload_digest,
        record_digest=record_digest,
        evidence_ref=str(evidence["evidence_ref"]),
        evidence_digest=str(evidence["evidence_digest"]),
        component_kinds=tuple(str(c["kind"]) for c in payload["components"]),
        citation_count=len(payload["citations"]),
        source_refs=tuple(sorted({str(c["source_ref"]) for c in payload["citations"]})),
        has_attestation="attestation" in evidence,
        trust_class=str(envelope["trust"]["class"]),
    )


def decision_object(result: AdmissionResult) -> dict[str, JsonValue]:
    return with_digest(
        "admission-decision",
        {
            "policy_id": result.policy_id,
            "policy_version": result.policy_version,
            "record_digest": result.record_digest,
            "decision": result.decision,
            "issued_at": format_instant(result.issued_at_ms),
        },
    )


@dataclass(frozen=True)
class AdmissionSubject:
    """The pending candidate an admission decides, its opened envelope and rebuilt record,
    and whether its content matches a tombstoned record's (the forget guard)."""

    candidate: memory.CandidateRow
    envelope: dict[str, Any]
    record: dict[str, JsonValue]
    guard_hit: bool
    # The generation of the snapshot that read the candidate (store/published.py).
    read_at: int


def read_subject(tx: Transaction, ctx: CallContext, candidate_id: str) -> AdmissionSubject:
    """Read and open the pending candidate `candidate_id` of the bound scope in `tx`.

    Raises:
        ToolError: NOT_FOUND (unknown, foreign or not pending); BLOB_MISSING (its body or key
            does not open); JOURNAL_CORRUPT (the rebuilt record differs); ALREADY_TERMINAL
            (its record was tombstoned).
    """
    candidate = memory.get_candidate(tx, ctx.scope_ref, candidate_id)
    if candidate is None or candidate.state != "pending":
        raise ToolError(ErrorCode.NOT_FOUND, "candidate unknown, foreign or not pending")
    return subject_of(tx, ctx, candidate, steps.open_item(ctx, candidate_id, candidate.sealed_body))


def subject_of(
    tx: Transaction,
    ctx: CallContext,
    candidate: memory.CandidateRow,
    envelope: dict[str, Any],
    *,
    tombstones: bool = True,
    record: dict[str, JsonValue] | None = None,
) -> AdmissionSubject:
    """The subject of a pending candidate whose envelope is open: its record rebuilt.

    `tombstones` False says the caller knows the scope holds no tombstoned record (the bulk
    import asks once per batch and never tombstones): neither tombstone check can hit then.
    `record`: the record the caller built from this very envelope and capture cursor (the
    bulk import, capturing it in the same transaction): not built a second time.

    Raises:
        ToolError: JOURNAL_CORRUPT when the rebuilt record differs; ALREADY_TERMINAL when its
            record was tombstoned.
    """
    if record is None:
        record = rebuild_record(envelope, candidate.capture_cursor)
    if record["record_digest"] != candidate.record_digest:
        raise ToolError(ErrorCode.JOURNAL_CORRUPT, "rebuilt record digest differs")
    if not tombstones:
        return AdmissionSubject(candidate, envelope, record, False, tx.generation)
    existing = memory.get_record(tx, ctx.scope_ref, candidate.record_id)
    if existing is not None and existing.state == "tombstoned":
        raise ToolError(ErrorCode.ALREADY_TERMINAL, "record already tombstoned")
    # Forgotten rows keep only keyed digests (core/forgotten.py): compare keyed forms.
    payload_keyed, guard_keyed = forgotten.guard_forms(
        ctx, candidate.payload_digest, candidate.guard_digest
    )
    guard_hit = memory.matches_tombstoned_content(tx, ctx.scope_ref, payload_keyed, guard_keyed)
    return AdmissionSubject(candidate, envelope, record, guard_hit, tx.generation)


@dataclass(frozen=True)
class AdmissionPlan:
    """What the admission policy decided, before the write transaction: the outcome
    (`accept`, `reject`, `adjudication_required`), the decision object and, on accept, the
    record's index entries (computed outside the writer's critical section)."""

    mutation: steps.MutationKey
    subject: AdmissionSubject
    outcome: str
    decision: dict[str, JsonValue]
    index: indexing.RecordIndex | None

    @property
    def ends_candidate(self) -> bool:
        """Accept and reject end the candidate: its pending key goes (SPEC §4.4)."""
        return self.outcome != "adjudication_required"


def decide(
    ctx: CallContext,
    audit: CallAudit,
    mutation: steps.MutationKey,
    subject: AdmissionSubject,
    classifiers: ClassifierSet | None = None,
) -> AdmissionPlan:
    """Ask `engram.admission` about `subject`, with the names of the scope's content
    `classifiers` its opened payload matches; the forget guard turns an accept of forgotten
    content into adjudication.

    Raises:
        PolicyUnavailable / PolicyStale: the decider cannot answer.
    """
    facts = (
        classifiers.classify(texts_by_kind(subject.envelope["payload"])) if classifiers else None
    )
    return decide_with_facts(ctx, audit, mutation, subject, facts)


def decide_with_facts(
    ctx: CallContext,
    audit: CallAudit,
    mutation: steps.MutationKey,
    subject: AdmissionSubject,
    facts: ClassifierFacts | None,
    index: indexing.RecordIndex | None = None,
) -> AdmissionPlan:
    """`decide` with the classifier names the payload matched already found, and on accept
    the record's `index` entries when already computed (the bulk import finds both from the
    payload in its worker processes, before the record's id is known).

    Raises:
        PolicyUnavailable / PolicyStale: the decider cannot answer.
    """
    result = ctx.services.decider.admission(
        ctx.subject, _admission_candidate(subject.candidate, subject.envelope), ctx.now_ms, facts
    )
    return concluded(ctx, audit, mutation, subject, result, index)


def concluded(
    ctx: CallContext,
    audit: CallAudit,
    mutation: steps.MutationKey,
    subject: AdmissionSubject,
    result: AdmissionResult,
    index: indexing.RecordIndex | None = None,
    decision: dict[str, JsonValue] | None = None,
) -> AdmissionPlan:
    """The plan that follows the admission policy's `result` about `subject`: the decision
    kept, the forget guard applied, the accepted record's index entries. The bulk import
    passes a result its worker asked for this very candidate (bulk/admission_guess.py),
    with its `decision_object`, made there too."""
    audit.decided(result.receipt)
    outcome = result.decision
    if outcome == "accept" and subject.guard_hit:
        # Forgotten content may not come back silently: it looks exactly like adjudication.
        outcome = "adjudication_required"
    # Outside the writer's critical section: a large record's terms take long to key.
    prepared = None
    if outcome == "accept":
        prepared = indexing.record_index(ctx, subject.record) if index is None else index
    if decision is None:
        decision = decision_object(result)
    return AdmissionPlan(mutation, subject, outcome, decision, prepared)


def request_admission(
    ctx: CallContext, audit: CallAudit, parsed: ParsedArguments, confirmation: object
) -> ToolOutcome:
    """Raises: ToolError / ProtocolRefusal per SPEC §4.4."""
    args = parsed.arguments
    candidate_id = str(args["candidate_id"])
    audit.targets(candidate_id)
    mutation, _ = steps.guard_mutation(ctx, audit, parsed, confirmation, target=candidate_id)
    with ctx.services.database.reading(audit_complete=False) as tx:
        replay = steps.stored_result(tx, ctx, mutation)
        if replay is not None:
            return ToolOutcome.succeeded({**replay, "replayed": True}, audit)
        mutation = mutation.absent_in(tx)
        subject = read_subject(tx, ctx, candidate_id)
    planned = decide(ctx, audit, mutation, subject, parsed.classifiers)

    def written(tx: Transaction, sealed: bytes | None, prepared: Index | None) -> Written:
        return Written(write(tx, ctx, audit, planned, sealed, prepared))

    if planned.outcome == "accept":
        assert planned.index is not None  # computed for every accept
        # The postings commit on their own, outside the writer's lock (issue 7, item 6).
        record = subject.record
        committed = commit_new_item(
            ctx, audit, mutation, str(record["record_id"]), record, written, planned.index
        )
    else:
        committed = commit(ctx, audit, mutation, lambda tx: written(tx, None, None))
    output = {**committed.output, "replayed": True} if committed.replayed else committed.output
    if not committed.raced:
        item_keys.after_commit(ctx, [candidate_id] if planned.ends_candidate else [])
    return ToolOutcome.succeeded(output, audit)


def write(
    tx: Transaction,
    ctx: CallContext,
    audit: CallAudit,
    planned: AdmissionPlan,
    sealed_record: bytes | None,
    prepared: indexing.RecordIndex | indexing.StagedIndex | None,
) -> dict[str, JsonValue]:
    """The admission's writes in `tx`: the decision (if it ends the candidate) and the
    idempotency result; the caller found the key new in `tx` and writes the audit entry.

    Raises:
        ToolError: NOT_FOUND when the candidate is no longer pending in `tx`;
            ALREADY_TERMINAL / ILLEGAL_TRANSITION from the lifecycle table.
    """
    candidate = planned.subject.candidate
    # Read again only if a commit since the snapshot changed its state (`end_candidate`).
    changed = key_intents.candidate_key(ctx.scope_ref, candidate.candidate_id)
    if tx.written_since(changed, planned.subject.read_at):
        current = memory.get_candidate(tx, ctx.scope_ref, candidate.candidate_id)
        if current is None or current.state != "pending":
            raise ToolError(ErrorCode.NOT_FOUND, "candidate changed concurrently")
    if planned.outcome == "adjudication_required":
        # The only trace of a hold: nothing is journaled until someone resolves it, and the
        # auditor's `admissions_held` query finds holds by this note (docs/auditors/guide.md).
        audit.noted(HELD_FOR_ADJUDICATION)
        outcome_body = _pending_outcome(candidate, planned.decision)
    else:
        outcome_body = _commit_decision(
            tx,
            ctx,
            audit,
            candidate,
            planned.subject.record,
            planned.decision,
            planned.outcome,
            planned.mutation,
            sealed_record,
            prepared,
        )
    output: dict[str, JsonValue] = {"outcome": outcome_body, "replayed": False}
    steps.remember_result(tx, ctx, planned.mutation, output)
    return output


def _pending_outcome(
    candidate: memory.CandidateRow, decision: dict[str, JsonValue]
) -> dict[str, JsonValue]:
    cursor = str(candidate.capture_cursor)
    decision_digest = str(decision["receipt_digest"])
    return {
        "status": "pending_adjudication",
        "candidate_id": candidate.candidate_id,
        "cursor": cursor,
        "decision_receipt_digest": decision_digest,
        "transaction_receipt_digest": digest(
            "admission-pending",
            {
                "candidate_id": candidate.candidate_id,
                "cursor": cursor,
                "decision_receipt_digest": decision_digest,
            },
        ),
    }


def _commit_decision(
    tx: Transaction,
    ctx: CallContext,
    audit: CallAudit,
    candidate: memory.CandidateRow,
    record: dict[str, JsonValue],
    decision: dict[str, JsonValue],
    outcome: str,
    mutation: steps.MutationKey,
    sealed_record: bytes | None,
    prepared: indexing.RecordIndex | indexing.StagedIndex | None,
) -> dict[str, JsonValue]:
    operation = "accept" if outcome == "accept" else "reject"
    event = conclude_admission(
        tx,
        ctx,
        audit,
        candidate,
        record,
        operation,
        {
            "digests": {
                "record_digest": candidate.record_digest,
                "decision_receipt_digest": decision["receipt_digest"],
            },
            "principal_ref": ctx.principal_ref,
            **audit.approval_fields(),
        },
        sealed_record,
        prepared_index=prepared,
    )
    body: dict[str, JsonValue] = {
        "status": "accepted" if operation == "accept" else "rejected",
        "candidate_id": candidate.candidate_id,
        "cursor": event.cursor_text,
        "decision_receipt_digest": decision["receipt_digest"],
        "transaction_receipt_digest": steps.transaction_receipt_digest(
            ctx, audit, mutation, event.event_hash, event.cursor_text
        ),
    }
    if operation == "accept":
        body["record_id"] = record["record_id"]
    return body
