"""Rules for host operators (SPEC §1.6, §8): adjudication, the record operations, time
passing and the expiry sweep, history and candidate inspection, each checked against
tests/model/maintenance_model.py.

Operators act in-process through `MaintenanceService`, as `engram-memory admin` does. Who
acts: the scope's maintainer (human:dana in acme, human:gina in globex), a reader (human:erin:
read-only in acme, unknown to globex), the other tenant's maintainer on this tenant's ids
(`foreign`: NOT_FOUND), or someone no policy names (`stranger`). Every call, success or
refusal, must leave exactly one audit entry, and only a success a journal event.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import multiple, precondition, rule

from tests.model.checks import OUTCOMES, RECORD_ID
from tests.model.machine_base import (
    MachineBase,
    Ref,
    candidates,
    nth_recent,
    picks,
    reasons,
    records,
    scopes,
)
from tests.model.model import AC, RECORD_OPERATIONS, refusal
from tests.model.scopes import DAY_MS, TIME_JUMP_MS

# Mostly the maintainer, so that changes happen; the others must be refused.
actors = st.sampled_from(["maintainer"] * 5 + ["reader", "foreign"])
inspectors = st.sampled_from(["maintainer", "maintainer", "reader", "foreign", "stranger"])
ENDINGS = ("expire", "trust_invalidate")  # after these, only forget (tombstone) remains


class MaintenanceRules(MachineBase):
    # Rules: changes.

    @rule(
        target=records,
        candidate=candidates,
        which=st.sampled_from(["held", "pending", "pending", "decided", "unknown", "record"]),
        decision=st.sampled_from(["accept", "accept", "reject"]),
        actor=actors,
        n=picks,
    )
    def adjudicate(self, candidate: Ref, which: str, decision: str, actor: str, n: int) -> Any:
        """Decide a candidate of `candidate`'s scope: one the tombstoned-content guard held
        (re-proposed here and now if the scope forgot content but holds none), one still
        pending (waiting for adjudication, or never sent to admission), one decided
        already, an unknown id, or a record id where a candidate id belongs (or, when the
        scope has no such candidate, the one drawn)."""
        model = self.models[candidate.scope]
        candidate_id = candidate.id
        if which == "held" and not any(model.guarded(c) for c in model.candidates.values()):
            self._re_propose_forgotten(candidate.scope, n)
        pending = [c for c in model.candidates.values() if c.state == "pending"]
        chosen = {
            "held": [c for c in pending if model.guarded(c)] or pending,
            "pending": pending,
            "decided": [c for c in model.candidates.values() if c.state != "pending"],
        }.get(which)
        if chosen:
            candidate_id = nth_recent(chosen, n).candidate_id
        elif which == "unknown":
            candidate_id = self._unknown_candidate()
        elif which == "record":
            known = list(model.records)
            candidate_id = nth_recent(known, n) if known else self._unknown_record()
        return self._adjudicate(candidate.scope, actor, candidate_id, decision)

    def _re_propose_forgotten(self, scope: str, n: int) -> None:
        """Capture content this scope forgot again, ticket-backed, and ask for admission:
        the guard holds it for a human (SPEC §4.4), as the recapture rule shows."""
        forgotten = sorted(self.models[scope].tombstoned_contents)
        if forgotten:
            content = nth_recent(forgotten, n)
            candidate_id = self._capture(scope, content, "ticket", self._key("fresh", 0))
            assert candidate_id is not None
            self._admit(scope, candidate_id, self._key("fresh", 0))

    def _adjudicate(self, home: str, actor: str, candidate_id: str, decision: str) -> Any:
        """`actor` decides `candidate_id` of `home`; the new record's Ref on an accept."""
        acting, value = self._maintain(
            home,
            actor,
            "adjudicate",
            lambda model, who: model.predict_adjudicate(who, candidate_id, decision),
            lambda who: self.admin.adjudicate(who, candidate_id, decision, "reason:adjudicated"),
        )
        if value is None:
            return multiple()
        acting.apply_adjudicate(candidate_id, decision)
        if decision == "reject":
            return multiple()
        record_id = str(value["record_id"])
        assert RECORD_ID.match(record_id), record_id
        assert record_id not in self.seen_ids, record_id
        self.seen_ids.add(record_id)
        return Ref(acting.spec.name, record_id)

    @rule(
        target=records,
        record=records,
        operation=st.sampled_from(RECORD_OPERATIONS),
        length=st.sampled_from([2, 3, 1]),
        n=picks,
        reason=reasons,
    )
    def walk(self, record: Ref, operation: str, length: int, n: int, reason: str) -> Any:
        """Up to `length` record operations in a row by the record's maintainer, each one
        the table allows from the record's state in the model (sequences are short, and a
        rewind, say, needs a record made historical first)."""
        newer: list[Ref] = []
        for _ in range(length):
            operation, successor_id = self._next_move(record, operation, n, newer)
            args = (operation, record.id, successor_id, reason)
            if not self._record_operation(record.scope, "maintainer", *args):
                break
        return multiple(*newer)

    @rule(
        record=records,
        successor=records,
        operation=st.sampled_from(RECORD_OPERATIONS),
        aim=st.sampled_from(["drawn", "drawn", "unknown", "stale successor"]),
        actor=st.sampled_from(["maintainer", "maintainer", "reader", "foreign", "stranger"]),
        n=picks,
        reason=reasons,
    )
    def transition(
        self,
        record: Ref,
        successor: Ref,
        operation: str,
        aim: str,
        actor: str,
        n: int,
        reason: str,
    ) -> None:
        """One operation, legal or not, by anyone: the one drawn, on a record of the bundle
        as it is (any state) or on an unknown id, its successor (for supersede) the one
        drawn: foreign, the record itself, not current, or fine. Or a supersede of a record
        the table lets be superseded (if the scope has one) by a record of the scope that is
        not current (the record itself if there is none)."""
        model = self.models[record.scope]
        record_id = self._unknown_record() if aim == "unknown" else record.id
        successor_id: str | None = successor.id
        if aim == "stale successor":
            operation = "supersede"
            live = [i for i, r in model.records.items() if refusal(operation, r.state) is None]
            record_id = nth_recent(live, n) if live else record_id
            stale = [i for i, r in model.records.items() if r.state != AC and i != record_id]
            successor_id = nth_recent(stale, n) if stale else record_id
        if operation != "supersede":
            successor_id = None
        self._record_operation(record.scope, actor, operation, record_id, successor_id, reason)

    @rule(
        record=records,
        who=st.sampled_from(["table", "table", "unauthorized", "foreign"]),
        tombstoned=st.sampled_from([False, False, True]),
        n=picks,
    )
    def refusals(self, record: Ref, who: str, tombstoned: bool, n: int) -> None:
        """Calls that must all be refused, each with its own audit entry and no event, on
        a record of the bundle (or a tombstoned one of its scope):
        - by its maintainer, every operation the table refuses from the record's state;
          and if the table lets it be superseded, a supersede by a record of the scope that
          is not current (if there is one);
        - by someone without `maintain` (acme's reader, a human no policy names) or by the
          other tenant's maintainer (in whose scope these ids do not exist), three of the
          operations (rotating) and the adjudication of a candidate of the scope (a
          pending one if there is one)."""
        model = self.models[record.scope]
        ended = [i for i, r in model.records.items() if r.state == "tombstoned"]
        if tombstoned and ended:
            record = Ref(record.scope, nth_recent(ended, n))
        state = model.records[record.id].state
        current = [i for i, r in model.records.items() if r.state == AC and i != record.id]
        # A successor that would do, so that only the record's state or the actor is refused.
        successor_id = nth_recent(current, n) if current else record.id
        actor = {"table": "maintainer", "foreign": "foreign"}.get(who)
        actor = actor or ("reader" if n % 2 else "stranger")
        operations = [op for op in RECORD_OPERATIONS if refusal(op, state) is not None]
        if who != "table":
            operations = [RECORD_OPERATIONS[(n + k) % len(RECORD_OPERATIONS)] for k in (0, 2, 4)]
        for operation in operations:
            successor = successor_id if operation == "supersede" else None
            args = (operation, record.id, successor, "reason:r")
            assert not self._record_operation(record.scope, actor, *args)
        stale = [i for i, r in model.records.items() if r.state != AC and i != record.id]
        if who == "table" and "supersede" not in operations and stale:
            args = ("supersede", record.id, nth_recent(stale, n), "reason:r")
            assert not self._record_operation(record.scope, actor, *args)
        if who != "table":
            pending = [i for i, c in model.candidates.items() if c.state == "pending"]
            candidate_id = pending[-1] if pending else model.records[record.id].candidate_id
            assert self._adjudicate(record.scope, actor, candidate_id, "accept") == multiple()

    def _next_move(
        self, record: Ref, drawn: str, n: int, newer: list[Ref]
    ) -> tuple[str, str | None]:
        """The drawn operation if the table allows it now, else one that keeps the record
        alive (expire and trust_invalidate end a walk), else the drawn one anyway; with a
        successor for supersede: another current record of the scope, made for it (and
        added to `newer`) if there is none."""
        model = self.models[record.scope]
        state = model.records[record.id].state
        current = [i for i, r in model.records.items() if r.state == AC and i != record.id]
        if drawn == "supersede" and refusal(drawn, state) is None and not current:
            made = self._newer_record(record)
            newer.extend(made)
            current = [ref.id for ref in made]

        def allowed(operation: str) -> bool:
            return refusal(operation, state) is None and (operation != "supersede" or current)

        if not allowed(drawn):
            moves = [op for op in RECORD_OPERATIONS if allowed(op) and op not in ENDINGS]
            drawn = moves[n % len(moves)] if moves else drawn
        if drawn != "supersede":
            return drawn, None
        return drawn, nth_recent(current, n) if current else record.id

    def _newer_record(self, record: Ref) -> list[Ref]:
        """A record to supersede `record` with, made the usual way (a ticket-backed capture
        of other content, admitted); none if admission held it (that content was forgotten
        here)."""
        content = (self.models[record.scope].records[record.id].content + 1) % 2
        newer = self._capture_then_admit(record.scope, content, "ticket")
        made = isinstance(newer, Ref)
        OUTCOMES[f"newer record to supersede with: {'made' if made else 'held'}"] += 1
        return [newer] if made else []

    def _record_operation(
        self,
        home: str,
        actor: str,
        operation: str,
        record_id: str,
        successor_id: str | None,
        reason: str,
    ) -> bool:
        """One record operation by `actor` on `home`'s record; True if it succeeded."""
        acting, value = self._maintain(
            home,
            actor,
            operation,
            lambda model, who: model.predict_transition(who, operation, record_id, successor_id),
            lambda who: self.admin.transition(who, operation, record_id, reason, successor_id),
        )
        if value is not None:
            acting.apply_transition(operation, record_id, successor_id)
        return value is not None

    # Rules: time, and the sweep that journals what time made due.

    def _catch_up(self) -> None:
        """Right before this sequence's first jump of the clock: expire what earlier
        sequences left due or about to be (they captured before `started_ms`, so theirs
        are due a second before this one's), or this sequence's sweeps would meet them.
        (The jump must follow at once: half a second later, this sequence's first records
        would be due too.)"""
        if self.caught_up:
            return
        self.caught_up = True
        for name, model in self.models.items():
            if model.spec.default_ttl_days is None:
                continue
            moment = self.started_ms + model.spec.default_ttl_days * DAY_MS + 500
            assert self.clock() < moment
            self.clock.advance(moment - self.clock())
            self.operator_calls += 1
            swept = self.admin.expiry_sweep(self._operator(name, "maintainer")[1], _quiet)
            for _ in range(int(swept["expired"])):
                model.journal("(an earlier sequence's record)", "expire")

    # Hypothesis favours rules without arguments: these two run only when they can change
    # something (a live record a jump would make due; a due record to sweep).
    @precondition(lambda self: any(m.expirable() for m in self.models.values()))
    @rule()
    def time_passes(self) -> None:
        """Longer than any TTL: every record captured so far is past its `expires_at`, and
        from now on hidden from reads, swept or not (SPEC §8 (3))."""
        self._catch_up()
        self.clock.advance(TIME_JUMP_MS)
        for model in self.models.values():
            model.epoch += 1
        OUTCOMES["time passes"] += 1

    @precondition(lambda self: any(m.due_live() for m in self.models.values()))
    @rule(scope=scopes, actor=st.sampled_from(["maintainer", "reader"]))
    def expiry_sweep(self, scope: str, actor: str) -> None:
        assert self.caught_up  # only a jump makes anything due
        due = len(self.models[scope].due_live())
        acting, value = self._maintain(
            scope,
            actor,
            "expiry_sweep",
            lambda model, who: model.predict_expiry_sweep(who),
            lambda who: self.admin.expiry_sweep(who, _quiet),
            note=f" ({min(due, 2)}{'+' if due >= 2 else ''} due)",
        )
        if value is not None:
            acting.apply_expiry_sweep()

    # Rules: inspection, which changes nothing.

    @precondition(lambda self: any(m.records for m in self.models.values()))
    @rule(
        scope=scopes,
        view=st.sampled_from(["record history", "candidate history", "candidate", "unknown"]),
        actor=inspectors,
        n=picks,
    )
    def inspect(self, scope: str, view: str, actor: str, n: int) -> None:
        """A record's or a candidate's history, a candidate's state, or an unknown id's
        history, by someone who may read (the maintainer, acme's reader) or may not, or
        from the other tenant."""
        model = self.models[scope]
        known = list(model.records if view == "record history" else model.candidates)
        target = nth_recent(known, n) if known and view != "unknown" else self._unknown_record()
        if view == "candidate":
            self._maintain(
                scope,
                actor,
                "inspect_candidate",
                lambda model, who: model.predict_inspect_candidate(who, target),
                lambda who: self.admin.inspect_candidate(who, target),
            )
        else:
            self._maintain(
                scope,
                actor,
                "history",
                lambda model, who: model.predict_history(who, target),
                lambda who: _events(self.admin.history(who, target)),
            )


def _events(history: dict[str, Any]) -> dict[str, Any]:
    """A history as the model tells it: (cursor, operation) per event, in order."""
    return {**history, "events": [(e["cursor"], e["operation"]) for e in history["events"]]}


def _quiet(_line: str) -> None:
    """Progress lines of a sweep, which a test does not print."""
