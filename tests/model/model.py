"""A pure-Python model of what an agent can observe of the lifecycle (SPEC §4, §6, §8).

It knows nothing of the service's code: only the contract and the shipped policy data
(policies/acme.yaml, policies/globex.yaml). Ids the model cannot compute without the digest
machinery (`candidate_id`, `record_digest`) are learned from the service's first answer; the
`record_id` of an acceptance is then predicted from the capture's `record_digest` (SPEC §9.3).

Cursors are relative: `ScopeModel.base` is the journal head read when a sequence starts, so
one store can serve many sequences (the policy data fixes the scopes, so a sequence cannot
have scopes of its own).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from engram_memory.demo import demo_capture_arguments

SEARCH = "engram_memory_search"
GET = "engram_memory_get"
CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"

PURPOSE = "purpose:support-case"
EVIDENCE_REFS = {
    "ticket": "evidence:ticket/T-4711",
    "untrusted": "evidence:untrusted/U-1",
    "review": "evidence:review/R-1",
}
# Content i has component kind CONTENT_KINDS[i]; acme holds `context` for adjudication.
CONTENT_KINDS = ("decision", "decision", "context")


@dataclass(frozen=True)
class ScopeSpec:
    """One policy-fixed scope, its caller, and its admission policy as the YAML states it."""

    name: str
    tenant: str
    workspace: str
    principal: str
    reject_prefixes: tuple[str, ...]
    adjudicate_kinds: tuple[str, ...]
    accept_prefixes: tuple[str, ...]

    @property
    def scope_ref(self) -> str:
        return f"tenant:{self.tenant}/workspace:{self.workspace}"

    def admission_class(self, evidence_ref: str, kind: str) -> str:
        """Precedence reject > adjudicate > accept > otherwise (adjudication_required)."""
        if any(evidence_ref.startswith(p) for p in self.reject_prefixes):
            return "reject"
        if kind in self.adjudicate_kinds:
            return "adjudicate"
        if any(evidence_ref.startswith(p) for p in self.accept_prefixes):
            return "accept"
        return "adjudicate"


ACME = ScopeSpec(
    name="acme",
    tenant="acme",
    workspace="support",
    principal="user:alice",
    reject_prefixes=("evidence:untrusted/",),
    adjudicate_kinds=("context",),
    accept_prefixes=("evidence:ticket/",),
)
# Globex has no reject rule and no adjudicate conditions: only tickets are accepted.
GLOBEX = ScopeSpec(
    name="globex",
    tenant="globex",
    workspace="main",
    principal="user:carol",
    reject_prefixes=(),
    adjudicate_kinds=(),
    accept_prefixes=("evidence:ticket/",),
)
SPECS = {spec.name: spec for spec in (ACME, GLOBEX)}


def content_token(word: str, content: int) -> str:
    return f"{word}k{content}"


def capture_arguments(
    word: str, content: int, evidence: str, key: str, at_ms: int
) -> dict[str, Any]:
    """A capture whose payload depends only on (word, content, at_ms): same content, same
    payload (so same guard digest), whatever the evidence and key."""
    text = f"Case {word} note {content_token(word, content)} was handled."
    args = demo_capture_arguments(text, key, evidence_ref=EVIDENCE_REFS[evidence])
    payload = args["payload"]
    payload["valid_time"] = {"t": at_ms}
    payload["primary_event"]["at"] = at_ms
    payload["components"][0]["kind"] = CONTENT_KINDS[content]
    return args


def canonical(value: Any) -> str:
    # Arguments are ASCII strings and small integers: sorted-key JSON is canonical enough.
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def record_id_for(record_digest: str) -> str:
    """SPEC §9.3: "mem_" + lowercase unpadded base32 of the digest bytes."""
    raw = bytes.fromhex(record_digest.removeprefix("sha256:"))
    return "mem_" + base64.b32encode(raw).decode("ascii").lower().rstrip("=")


@dataclass
class Candidate:
    candidate_id: str
    content: int
    evidence: str
    state: str  # pending | rejected | withdrawn | promoted
    capture_cursor: int  # relative
    record_digest: str


@dataclass
class Record:
    record_id: str
    candidate_id: str
    content: int
    state: str  # accepted_current | tombstoned
    recorded_cursor: int  # relative: the capture's
    record_digest: str


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
    head: int = 0
    candidates: dict[str, Candidate] = field(default_factory=dict)
    records: dict[str, Record] = field(default_factory=dict)
    tombstoned_contents: set[int] = field(default_factory=set)
    keys: dict[str, Binding] = field(default_factory=dict)

    def cursor(self, relative: int) -> str:
        return str(self.base + relative)

    # Reads.

    def visible(self, record_id: str) -> bool:
        record = self.records.get(record_id)
        return record is not None and record.state == "accepted_current"

    def search_hits(self, word: str, query_tokens: set[str]) -> set[str]:
        """Records whose text holds a query token: every capture holds `word` and its own
        content token, nothing else a query uses."""
        return {
            r.record_id
            for r in self.records.values()
            if r.state == "accepted_current"
            and query_tokens & {word, content_token(word, r.content)}
        }

    # Mutations: predict, then apply the service's answer.

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
        if candidate.state != "pending":
            return Prediction(code="ALREADY_TERMINAL")
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
        if record.state == "tombstoned":
            return Prediction(code="ALREADY_TERMINAL")
        receipt = {
            "event_id": f"tombstone:{record_id}",
            "operation": "tombstone",
            "from_state": "accepted_current",
            "to_state": "tombstoned",
            "cursor": self.cursor(self.head + 1),
        }
        return Prediction(
            fields={"receipt": receipt, "replayed": False, "projection_invalidation": "complete"}
        )

    def apply(
        self, tool: str, args: dict[str, Any], meta: dict[str, Any], output: dict[str, Any]
    ) -> None:
        """Fold a fresh success (never a replay or an error) into the model."""
        self.keys[args["idempotency_key"]] = Binding(tool, canonical(args), output)
        if tool == CAPTURE:
            self.head += 1
            candidate_id = output["candidate_id"]
            self.candidates[candidate_id] = Candidate(
                candidate_id,
                meta["content"],
                meta["evidence"],
                "pending",
                self.head,
                output["record_digest"],
            )
        elif tool == ADMIT:
            outcome = output["outcome"]
            candidate = self.candidates[outcome["candidate_id"]]
            if outcome["status"] == "accepted":
                self.head += 1
                candidate.state = "promoted"
                record_id = outcome["record_id"]
                self.records[record_id] = Record(
                    record_id,
                    candidate.candidate_id,
                    candidate.content,
                    "accepted_current",
                    candidate.capture_cursor,
                    candidate.record_digest,
                )
            elif outcome["status"] == "rejected":
                self.head += 1
                candidate.state = "rejected"
        elif tool == WITHDRAW:
            self.head += 1
            self.candidates[args["candidate_id"]].state = "withdrawn"
        else:
            self.head += 1
            record = self.records[args["record_id"]]
            record.state = "tombstoned"
            self.tombstoned_contents.add(record.content)
