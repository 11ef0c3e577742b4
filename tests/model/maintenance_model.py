"""The model of host maintenance (SPEC §1.6, §8): what an operator's call must return, and
how it changes the scope. Like tests/model/model.py, it restates the contract and the policy
data, never the service's code.

An operator is bound to one workspace; its call is decided there, in this order: authority
(`maintain` to change anything, `read` to inspect; UNAUTHORIZED without it, nothing written),
then the target, which resolves only in that scope (another tenant's id is NOT_FOUND, exactly
like an unknown one, SPEC §1.3), then the transition table. A success of a change appends
exactly one journal event per record it moves by name; a refusal appends none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram_memory.core.forgotten import keyed_form
from tests.model.model import (
    AC,
    AD,
    LIVE,
    NOT_FOUND,
    TRANSITIONS,
    Candidate,
    H,
    Prediction,
    ScopeModel,
    refusal,
)
from tests.model.scopes import record_id_for

UNAUTHORIZED = Prediction(code="UNAUTHORIZED")


@dataclass
class MaintainedScopeModel(ScopeModel):
    """A scope model that also answers for its host operators.

    `forgotten_key` is the scope's key for forgotten content (core/forgotten.py): once a
    candidate is withdrawn or its record forgotten, the store keeps only keyed digests, so
    inspecting that candidate shows the keyed form of its `record_digest`.
    """

    forgotten_key: bytes = b""

    def _inspected_digest(self, candidate: Candidate) -> str:
        record = self.records.get(record_id_for(candidate.record_digest))
        forgotten = candidate.state == "withdrawn" or (
            record is not None and record.state == "tombstoned"
        )
        digest: str = candidate.record_digest
        return keyed_form(self.forgotten_key, digest) if forgotten else digest

    def _lacks(self, operator: str, authority: str) -> bool:
        return authority not in self.spec.authorities(operator)

    # Changes (`maintain`).

    def predict_adjudicate(self, operator: str, candidate_id: str, decision: str) -> Prediction:
        """A human accepts or rejects a pending candidate: held by the guard, waiting for
        adjudication, or never sent to admission at all; the policy is not asked again."""
        if self._lacks(operator, "maintain"):
            return UNAUTHORIZED
        candidate = self.candidates.get(candidate_id)
        if candidate is None:
            return NOT_FOUND
        refused = refusal(decision, candidate.state)
        if refused is not None:
            return Prediction(code=refused)
        fields: dict[str, Any] = {
            "candidate_id": candidate_id,
            "status": "accepted" if decision == "accept" else "rejected",
            "cursor": self.cursor(self.head + 1),
        }
        if decision == "accept":
            fields["record_id"] = record_id_for(candidate.record_digest)
            return Prediction(fields=fields, note=" (guard)" if self.guarded(candidate) else "")
        return Prediction(fields=fields, absent=(("record_id",),))

    def apply_adjudicate(self, candidate_id: str, decision: str) -> None:
        self.conclude(self.candidates[candidate_id], decision)

    def predict_transition(
        self, operator: str, operation: str, record_id: str, successor_id: str | None
    ) -> Prediction:
        """SPEC §8: the record's own transition first; then, for supersede, a successor in
        this scope, distinct from the record (else NOT_FOUND, as tests/admin pins down) and
        `accepted_current` (else ILLEGAL_TRANSITION)."""
        if self._lacks(operator, "maintain"):
            return UNAUTHORIZED
        record = self.records.get(record_id)
        if record is None:
            return NOT_FOUND
        refused = refusal(operation, record.state)
        if refused is not None:
            return Prediction(code=refused)
        note = ""
        if operation == "supersede":
            assert successor_id is not None
            successor = self.records.get(successor_id)
            if successor is None or successor_id == record_id:
                return Prediction(code="NOT_FOUND", note=" (successor)")
            if successor.state != AC:
                return Prediction(code="ILLEGAL_TRANSITION", note=" (successor)")
        if operation == "rewind" and self._demoted_by_rewind(record_id) is not None:
            note = " (demotes successor)"
        return Prediction(
            fields={
                "record_id": record_id,
                "operation": operation,
                "from_state": record.state,
                "to_state": TRANSITIONS[operation][record.state],
                "cursor": self.cursor(self.head + 1),
            },
            note=note,
        )

    def _demoted_by_rewind(self, record_id: str) -> str | None:
        """SPEC §8: rewinding a superseded record turns its successor historical, if it
        still is current or disputed (the only states the table leads to H from)."""
        successor_id = self.records[record_id].superseded_by
        if successor_id is None or self.records[successor_id].state not in (AC, AD):
            return None
        return successor_id

    def apply_transition(self, operation: str, record_id: str, successor_id: str | None) -> None:
        demoted = self._demoted_by_rewind(record_id) if operation == "rewind" else None
        self.move(self.records[record_id], operation, successor_id)
        if demoted is not None:
            # Atomic with the rewind and named in its event, so no event of its own.
            successor = self.records[demoted]
            successor.state, successor.superseded_by = H, None

    def expirable(self) -> bool:
        """A live record a jump of the clock would make due."""
        return (
            any(r.state in LIVE and not self.due(r) for r in self.records.values())
            and self.spec.default_ttl_days is not None
        )

    def due_live(self) -> list[str]:
        return sorted(r.record_id for r in self.records.values() if r.state in LIVE and self.due(r))

    def predict_expiry_sweep(self, operator: str) -> Prediction:
        """An `expire` for every live record past its `expires_at`, none for anything else."""
        if self._lacks(operator, "maintain"):
            return UNAUTHORIZED
        return Prediction(fields={"expired": len(self.due_live())})

    def apply_expiry_sweep(self) -> None:
        for record_id in self.due_live():
            self.move(self.records[record_id], "expire")

    # Inspection (`read`): never a journal event.

    def predict_history(self, operator: str, target_id: str) -> Prediction:
        """The target's events in cursor order, spanning acceptance (a record's history
        starts with its candidate's capture and accept; a candidate's continues with the
        record it became)."""
        if self._lacks(operator, "read"):
            return UNAUTHORIZED
        related = {target_id}
        if target_id in self.records:
            related.add(self.records[target_id].candidate_id)
        candidate = self.candidates.get(target_id)
        if candidate is not None and candidate.state == "promoted":
            related.add(record_id_for(candidate.record_digest))
        events = [
            (self.cursor(cursor), operation)
            for cursor, target, operation in self.events
            if target in related
        ]
        return Prediction(fields={"events": events}) if events else NOT_FOUND

    def predict_inspect_candidate(self, operator: str, candidate_id: str) -> Prediction:
        if self._lacks(operator, "read"):
            return UNAUTHORIZED
        candidate = self.candidates.get(candidate_id)
        if candidate is None:
            return NOT_FOUND
        return Prediction(
            fields={
                "candidate_id": candidate_id,
                "state": candidate.state,
                "record_digest": self._inspected_digest(candidate),
                "capture_cursor": self.cursor(candidate.capture_cursor),
            },
            absent=(("envelope",),),
        )
