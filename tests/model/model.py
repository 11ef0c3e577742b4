"""A pure-Python model of what agents and host operators can observe of the lifecycle
(SPEC §4, §6, §8).

It knows nothing of the service's code: only the contract and the shipped policy data
(tests/model/scopes.py). Ids the model cannot compute without the digest machinery
(`candidate_id`, `record_digest`) are learned from the service's first answer; the
`record_id` of an acceptance is then predicted from the capture's `record_digest` (SPEC §9.3).
Host maintenance (adjudication, record operations, the expiry sweep, inspection) is in
tests/model/maintenance_model.py.

Cursors are relative: `ScopeModel.base` is the journal head read when a sequence starts, so
one store can serve many sequences (the policy data fixes the scopes, so a sequence cannot
have scopes of its own).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.model.scopes import (
    ADMIT,
    CAPTURE,
    CONTENT_KINDS,
    EVIDENCE_REFS,
    FORGET,
    WITHDRAW,
    ScopeSpec,
    canonical,
    content_token,
    record_id_for,
)

AC, AD, H = "accepted_current", "accepted_disputed", "historical"
_LIVE = (AC, AD, H)
# SPEC §8, restated from its table: operation -> {from state: to state}. Candidates end
# `promoted`, `rejected` or `withdrawn`; records move among the six record states.
TRANSITIONS: dict[str, dict[str, str]] = {
    "accept": {"pending": "promoted"},
    "reject": {"pending": "rejected"},
    "withdraw": {"pending": "withdrawn"},
    "dispute": {AC: AD},
    "resolve_dispute": {AD: AC},
    "supersede": {AC: H, AD: H},
    "mark_non_current": {AC: H, AD: H},
    "rewind": {H: AC},
    "expire": dict.fromkeys(_LIVE, "expired"),
    "trust_invalidate": dict.fromkeys(_LIVE, "trust_invalid"),
    "tombstone": dict.fromkeys((*_LIVE, "expired", "trust_invalid"), "tombstoned"),
}
TERMINAL = frozenset({"rejected", "withdrawn", "promoted", "tombstoned"})
RECORD_OPERATIONS = (
    "dispute",
    "resolve_dispute",
    "supersede",
    "mark_non_current",
    "rewind",
    "expire",
    "trust_invalidate",
)
LIVE = frozenset(_LIVE)  # what expiry applies to


def refusal(operation: str, state: str) -> str | None:
    """SPEC §8: any transition not in the table is refused, ALREADY_TERMINAL from a
    terminal state, else ILLEGAL_TRANSITION; None if the table has it."""
    if state in TERMINAL:
        return "ALREADY_TERMINAL"
    return None if state in TRANSITIONS[operation] else "ILLEGAL_TRANSITION"


@dataclass
class Candidate:
    candidate_id: str
    content: int
    evidence: str
    state: str  # pending | rejected | withdrawn | promoted
    capture_cursor: int  # relative
    record_digest: str
    epoch: int  # how many clock jumps preceded the capture (its expiry counts from there)


@dataclass
class Record:
    record_id: str
    candidate_id: str
    content: int
    state: str  # one of the six record states
    recorded_cursor: int  # relative: the capture's
    record_digest: str
    epoch: int  # the capture's
    # The successor named by the supersede that made this record historical, which a rewind
    # demotes (SPEC §8); any other transition of this record ends the link.
    superseded_by: str | None = None


@dataclass
class Binding:
    """The first successful use of an idempotency key in this (scope, principal)."""

    tool: str
    arguments: str
    output: dict[str, Any]


@dataclass(frozen=True)
class Prediction:
    """What the service must answer: an error code, an exact replay, or a fresh success
    whose `fields` (a nested partial object) must match, `absent` paths missing."""

    code: str | None = None
    replay: dict[str, Any] | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    absent: tuple[tuple[str, ...], ...] = ()
    note: str = ""  # for coverage statistics only


NOT_FOUND = Prediction(code="NOT_FOUND")


@dataclass
class ScopeModel:
    spec: ScopeSpec
    base: int
    # The clock jumps of this sequence so far (the clock is shared by both scopes).
    epoch: int = 0
    candidates: dict[str, Candidate] = field(default_factory=dict)
    records: dict[str, Record] = field(default_factory=dict)
    tombstoned_contents: set[int] = field(default_factory=set)
    keys: dict[str, Binding] = field(default_factory=dict)
    # This sequence's journal events: (relative cursor, target id, operation).
    events: list[tuple[int, str, str]] = field(default_factory=list)

    @property
    def head(self) -> int:
        return len(self.events)

    def cursor(self, relative: int) -> str:
        return str(self.base + relative)

    def journal(self, target_id: str, operation: str) -> None:
        self.events.append((self.head + 1, target_id, operation))

    # Reads.

    def due(self, record: Record) -> bool:
        """Past its `expires_at` (SPEC §11 default TTL): captured before a clock jump longer
        than the scope's TTL. Expiry needs no event to hide a record (SPEC §8 (3))."""
        return self.spec.default_ttl_days is not None and record.epoch < self.epoch

    def visible(self, record_id: str) -> bool:
        record = self.records.get(record_id)
        return record is not None and record.state == AC and not self.due(record)

    def search_hits(self, word: str, query_tokens: set[str]) -> set[str]:
        """Records whose text holds a query token: every capture holds `word` and its own
        content token, nothing else a query uses."""
        return {
            r.record_id
            for r in self.records.values()
            if self.visible(r.record_id) and query_tokens & {word, content_token(word, r.content)}
        }

    # Agent mutations: predict, then apply the service's answer.

    def predict(self, tool: str, args: dict[str, Any], meta: dict[str, Any]) -> Prediction:
        """SPEC §1.8 order from idempotency on: key first (§6), then target (§4.4-4.6)."""
        bound = self.keys.get(args["idempotency_key"])
        if bound is not None:
            if bound.tool != tool or bound.arguments != canonical(args):
                return Prediction(code="DIGEST_CONFLICT")
            if tool == CAPTURE:
                return Prediction(replay={**bound.output, "status": "duplicate_exact"})
            return Prediction(replay={**bound.output, "replayed": True})
        if tool == CAPTURE:
            return Prediction(
                fields={"status": "committed_pending", "cursor": self.cursor(self.head + 1)}
            )
        if tool == ADMIT:
            return self._predict_admission(args["candidate_id"])
        if tool == WITHDRAW:
            return self._predict_withdraw(args["candidate_id"])
        assert tool == FORGET
        return self._predict_forget(args["record_id"])

    def guarded(self, candidate: Candidate) -> bool:
        """The tombstoned-content guard (SPEC §4.4): an accept of content identical to a
        tombstoned record's in this scope is held. The payload ignores the evidence."""
        kind = CONTENT_KINDS[candidate.content]
        decision = self.spec.admission_class(EVIDENCE_REFS[candidate.evidence], kind)
        return decision == "accept" and candidate.content in self.tombstoned_contents

    def admission_status(self, candidate: Candidate) -> str:
        kind = CONTENT_KINDS[candidate.content]
        decision = self.spec.admission_class(EVIDENCE_REFS[candidate.evidence], kind)
        if self.guarded(candidate):
            return "pending_adjudication"
        return {
            "accept": "accepted",
            "reject": "rejected",
            "adjudicate": "pending_adjudication",
        }[decision]

    def _predict_admission(self, candidate_id: str) -> Prediction:
        candidate = self.candidates.get(candidate_id)
        if candidate is None or candidate.state != "pending":
            return NOT_FOUND
        status = self.admission_status(candidate)
        outcome: dict[str, Any] = {"status": status, "candidate_id": candidate_id}
        if status == "pending_adjudication":
            outcome["cursor"] = self.cursor(candidate.capture_cursor)
            return Prediction(
                fields={"outcome": outcome, "replayed": False},
                absent=(("outcome", "record_id"),),
                note=" (guard)" if self.guarded(candidate) else "",
            )
        outcome["cursor"] = self.cursor(self.head + 1)
        if status == "accepted":
            outcome["record_id"] = record_id_for(candidate.record_digest)
            return Prediction(fields={"outcome": outcome, "replayed": False})
        return Prediction(
            fields={"outcome": outcome, "replayed": False}, absent=(("outcome", "record_id"),)
        )

    def _predict_withdraw(self, candidate_id: str) -> Prediction:
        candidate = self.candidates.get(candidate_id)
        if candidate is None:
            return NOT_FOUND
        refused = refusal("withdraw", candidate.state)
        if refused is not None:
            return Prediction(code=refused)
        receipt = {
            "event_id": f"withdraw:{candidate_id}",
            "operation": "withdraw",
            "from_state": "pending",
            "to_state": "withdrawn",
            "cursor": self.cursor(self.head + 1),
        }
        return Prediction(
            fields={"receipt": receipt, "replayed": False, "key_destruction": "complete"}
        )

    def _predict_forget(self, record_id: str) -> Prediction:
        record = self.records.get(record_id)
        if record is None:
            return NOT_FOUND
        refused = refusal("tombstone", record.state)
        if refused is not None:
            return Prediction(code=refused)
        receipt = {
            "event_id": f"tombstone:{record_id}",
            "operation": "tombstone",
            "from_state": record.state,  # SPEC §4.6: the record's state before
            "to_state": "tombstoned",
            "cursor": self.cursor(self.head + 1),
        }
        return Prediction(
            fields={"receipt": receipt, "replayed": False, "projection_invalidation": "complete"},
            note="" if record.state == AC else f" from {record.state}",
        )

    def apply(
        self, tool: str, args: dict[str, Any], meta: dict[str, Any], output: dict[str, Any]
    ) -> None:
        """Fold a fresh success (never a replay or an error) into the model."""
        self.keys[args["idempotency_key"]] = Binding(tool, canonical(args), output)
        if tool == CAPTURE:
            candidate_id = output["candidate_id"]
            self.journal(candidate_id, "capture")
            self.candidates[candidate_id] = Candidate(
                candidate_id,
                meta["content"],
                meta["evidence"],
                "pending",
                self.head,
                output["record_digest"],
                self.epoch,
            )
        elif tool == ADMIT:
            outcome = output["outcome"]
            if outcome["status"] in ("accepted", "rejected"):
                decision = "accept" if outcome["status"] == "accepted" else "reject"
                self.conclude(self.candidates[outcome["candidate_id"]], decision)
        elif tool == WITHDRAW:
            self.journal(args["candidate_id"], "withdraw")
            self.candidates[args["candidate_id"]].state = "withdrawn"
        else:
            self.move(self.records[args["record_id"]], "tombstone")

    def conclude(self, candidate: Candidate, decision: str) -> None:
        """Accept (a new `accepted_current` record) or reject a pending candidate, by policy
        or by a human: one event either way."""
        self.journal(candidate.candidate_id, decision)
        candidate.state = TRANSITIONS[decision]["pending"]
        if decision == "accept":
            record_id = record_id_for(candidate.record_digest)
            self.records[record_id] = Record(
                record_id,
                candidate.candidate_id,
                candidate.content,
                AC,
                candidate.capture_cursor,
                candidate.record_digest,
                candidate.epoch,
            )

    def move(self, record: Record, operation: str, successor_id: str | None = None) -> None:
        """One record transition the table allows: its event, its new state, its links."""
        self.journal(record.record_id, operation)
        record.state = TRANSITIONS[operation][record.state]
        record.superseded_by = successor_id
        if operation == "tombstone":
            self.tombstoned_contents.add(record.content)
