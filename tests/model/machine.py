"""The state machine: random sequences of the six tools and of host maintenance over two
tenants, each step checked against the model (tests/model/model.py,
tests/model/maintenance_model.py) and folded into it.

Two callers: user:alice in acme/support and user:carol in globex/main, both with all six
tools; their rules are here, the operators' in tests/model/admin_rules.py. Ids the service
hands out go to bundles; later steps act on them from their own scope or, now and then, from
the other tenant's (`foreign`), where they must not exist.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, multiple, precondition, rule

from engram_memory.contract.errors import ProtocolCode
from engram_memory.contract.exceptions import ProtocolRefusal
from tests.model.admin_rules import MaintenanceRules
from tests.model.checks import OUTCOMES, matches
from tests.model.machine_base import (
    Ref,
    candidates,
    foreign,
    forgotten,
    nth_recent,
    picks,
    reasons,
    records,
    scopes,
)
from tests.model.model import Prediction
from tests.model.scopes import (
    ADMIT,
    CAPTURE,
    CONTENT_KINDS,
    FORGET,
    GET,
    PURPOSE,
    SEARCH,
    WITHDRAW,
    content_token,
)

key_modes = st.sampled_from(["fresh", "fresh", "fresh", "reuse"])
# For request_admission, withdraw and forget: "retry" repeats the call at once.
transition_key_modes = st.sampled_from(["fresh", "fresh", "fresh", "reuse", "retry"])
contents = st.integers(min_value=0, max_value=2)
evidences = st.sampled_from(["ticket", "ticket", "untrusted", "review"])
admitted_evidences = st.sampled_from(["ticket", "ticket", "ticket", "untrusted", "review"])


class LifecycleMachine(MaintenanceRules):
    # Rules: the four mutations. Ids the service hands out go to bundles, so later steps
    # act on them, from their own scope or from the other tenant's.

    @rule(
        target=candidates,
        scope=scopes,
        content=contents,
        evidence=evidences,
        key_mode=key_modes,
        pick=picks,
    )
    def capture(self, scope: str, content: int, evidence: str, key_mode: str, pick: int) -> Any:
        candidate_id = self._capture(scope, content, evidence, self._key(key_mode, pick))
        return multiple() if candidate_id is None else Ref(scope, candidate_id)

    # Two calls, and hypothesis picks this rule often: once a sequence has a few records,
    # its steps are better spent on what they can do.
    @precondition(lambda self: sum(len(m.records) for m in self.models.values()) < 3)
    @rule(target=records, scope=scopes, content=contents, evidence=admitted_evidences)
    def capture_then_admit(self, scope: str, content: int, evidence: str) -> Any:
        """The usual agent flow in one step, mostly with ticket evidence, so sequences
        reach records (and the tombstoned-content guard) sooner."""
        return self._capture_then_admit(scope, content, evidence)

    @initialize(target=records, scope=scopes, content=contents, evidence=admitted_evidences)
    def first_admission(self, scope: str, content: int, evidence: str) -> Any:
        """Every sequence starts with the usual flow done once, so that most rules apply
        from its first step: hypothesis turns rules off at random per sequence (swarm
        testing), and one whose capture rules are off could otherwise only send strays."""
        return self._capture_then_admit(scope, content, evidence)

    @rule(
        target=records,
        record=forgotten,
        foreign=foreign,
        then=st.sampled_from(["wait", "accept", "accept", "reject"]),
    )
    def recapture(self, record: Ref, foreign: bool, then: str) -> Any:
        """Capture a forgotten record's content again, with ticket evidence, and ask for
        admission: held in its own scope (the guard), accepted in the other tenant's unless
        that one forgot identical content too. A held one then mostly goes to a human, as
        it would: only an adjudication brings forgotten content back (SPEC §4.4)."""
        content = self.models[record.scope].records[record.id].content
        scope = self._aim(record, foreign)
        candidate_id = self._capture(scope, content, "ticket", self._key("fresh", 0))
        assert candidate_id is not None
        admitted = self._admit(scope, candidate_id, self._key("fresh", 0))
        held = self.models[scope].candidates[candidate_id].state == "pending"
        if not held or then == "wait":
            return admitted
        return self._adjudicate(scope, "maintainer", candidate_id, then)

    @rule(
        target=records,
        candidate=candidates,
        foreign=foreign,
        key_mode=transition_key_modes,
        pick=picks,
    )
    def request_admission(self, candidate: Ref, foreign: bool, key_mode: str, pick: int) -> Any:
        scope, key = self._aim(candidate, foreign), self._key(key_mode, pick)
        return self._admit(scope, candidate.id, key, key_mode)

    @rule(
        candidate=candidates,
        foreign=foreign,
        key_mode=transition_key_modes,
        pick=picks,
        reason=reasons,
    )
    def withdraw(
        self, candidate: Ref, foreign: bool, key_mode: str, pick: int, reason: str
    ) -> None:
        args = {
            "candidate_id": candidate.id,
            "idempotency_key": self._key(key_mode, pick),
            "reason_ref": reason,
        }
        self._agent_transition(self._aim(candidate, foreign), WITHDRAW, args, key_mode)

    @rule(
        target=forgotten,
        record=records,
        foreign=foreign,
        key_mode=transition_key_modes,
        pick=picks,
        reason=reasons,
    )
    def forget(self, record: Ref, foreign: bool, key_mode: str, pick: int, reason: str) -> Any:
        args = {
            "record_id": record.id,
            "idempotency_key": self._key(key_mode, pick),
            "reason_ref": reason,
        }
        scope = self._aim(record, foreign)
        _, fresh = self._agent_transition(scope, FORGET, args, key_mode)
        return Ref(scope, record.id) if fresh else multiple()

    @rule(
        scope=scopes,
        tool=st.sampled_from([ADMIT, WITHDRAW, FORGET, GET]),
        key_mode=key_modes,
        pick=picks,
    )
    def stray(self, scope: str, tool: str, key_mode: str, pick: int) -> None:
        """Targets that never existed, and record ids given where a candidate id belongs."""
        if tool == GET:
            self._get(scope, self._unknown_record())
            return
        args: dict[str, Any] = {"idempotency_key": self._key(key_mode, pick)}
        if tool == FORGET:
            args["record_id"] = self._unknown_record()
        else:
            known = sorted(self.models[scope].records)
            stray = nth_recent(known, pick) if pick % 2 and known else self._unknown_candidate()
            args["candidate_id"] = stray
        if tool != ADMIT:
            args["reason_ref"] = "reason:r"
        self._mutate(scope, tool, args, {})

    @precondition(lambda self: self.history)
    @rule(
        source=scopes,
        foreign=foreign,
        tool=st.sampled_from([CAPTURE, ADMIT, WITHDRAW, FORGET]),
        pick=picks,
    )
    def resend(self, source: str, foreign: bool, tool: str, pick: int) -> None:
        """Send a past successful mutation (of `tool` if there is one) again, exactly: a
        replay in its own scope, a new call (with foreign targets) in the other one."""
        past = [entry for entry in self.history if entry[0] == source]
        past = [entry for entry in past if entry[1] == tool] or past
        if past:
            _, tool, args, meta = nth_recent(past, pick)
            self._mutate(self._other(source) if foreign else source, tool, args, meta)

    # Rules: the two reads.

    @rule(record=records, foreign=foreign)
    def get(self, record: Ref, foreign: bool) -> None:
        self._get(self._aim(record, foreign), record.id)

    def _get(self, scope: str, record_id: str) -> None:
        model = self.models[scope]
        args = {"record_id": record_id, "purpose_ref": PURPOSE}
        visible = model.visible(record_id)
        value = self._expect(
            self.callers[scope].call(GET, args),
            Prediction() if visible else Prediction(code="NOT_FOUND"),
        )
        # Why a record of this scope is hidden (SPEC §8): its state, or time alone.
        known = model.records.get(record_id)
        why = "" if known is None else f" ({known.state})"
        if known is not None and known.state == "accepted_current" and model.due(known):
            why = " (past expires_at)"
        OUTCOMES["get: ok" if visible else f"get: NOT_FOUND{why}"] += 1
        if value is None:
            return
        record = model.records[record_id]
        self._check_body(scope, value["record"], record.content)
        assert value["redacted_fields"] == []  # stewards see everything (policy data)
        matches(
            value,
            {
                "record": {
                    "record_id": record_id,
                    "record_digest": record.record_digest,
                    "recorded_cursor": model.cursor(record.recorded_cursor),
                },
                "read_receipt": {
                    "record_id": record_id,
                    "system_as_of": model.cursor(model.head),
                },
            },
        )

    @rule(
        record=records,
        foreign=foreign,
        query=st.sampled_from(["word", "word", "content", "pair", "none"]),
        limit=st.sampled_from([1, 50]),
    )
    def search(self, record: Ref, foreign: bool, query: str, limit: int) -> None:
        """Search where a record was made (or in the other tenant): by the sequence's word
        (every capture), the record's content token, that and another one, or nothing."""
        scope = self._aim(record, foreign)
        model, other = self.models[scope], self.models[self._other(scope)]
        content = self.models[record.scope].records[record.id].content
        tokens = {
            "word": [self.word],
            "content": [content_token(self.word, content)],
            "pair": [
                content_token(self.word, content),
                content_token(self.word, (content + 1) % len(CONTENT_KINDS)),
            ],
            "none": [f"{self.word}none"],
        }[query]
        expected = model.search_hits(self.word, set(tokens))
        args: dict[str, Any] = {"query": " ".join(tokens), "purpose_ref": PURPOSE, "limit": limit}
        ids: list[str] = []
        ranks: list[int] = []
        page_cursor = None
        for _ in range(30):
            page = {**args, **({"page_cursor": page_cursor} if page_cursor else {})}
            value = self._expect(self.callers[scope].call(SEARCH, page), Prediction())
            assert value is not None
            assert value["rank_receipt"]["system_as_of"] == model.cursor(model.head)
            assert len(value["records"]) <= limit
            for packet in value["records"]:
                record_id = packet["record"]["record_id"]
                ids.append(record_id)
                ranks.append(packet["rank"])
                assert record_id not in other.records, "another tenant's record"
                if record_id in model.records:
                    found = model.records[record_id]
                    assert packet["record"]["record_digest"] == found.record_digest
                    self._check_body(scope, packet["record"], found.content)
                    assert packet["redacted_fields"] == []
            page_cursor = value.get("next_page_cursor")
            if page_cursor is None:
                break
        assert page_cursor is None, "search never ran out of pages"
        assert len(ids) == len(set(ids)), ids
        assert set(ids) == expected, (query, sorted(ids), sorted(expected))
        assert ranks == list(range(1, len(ids) + 1))
        OUTCOMES[f"search: {min(len(ids), 3)}{'+' if len(ids) >= 3 else ''} hits"] += 1

    # Rules: refused calls change nothing, whatever the key's state.

    @rule(
        record=records,
        kind=st.sampled_from(["no_confirmation", "wrong_target", "purpose"]),
        pick=picks,
    )
    def refused(self, record: Ref, kind: str, pick: int) -> None:
        """A forget that would succeed, or a past withdraw/forget whose replay would, refused
        before its key is looked at (SPEC §1.8: gate before idempotency)."""
        scope = record.scope
        caller = self.callers[scope]
        if kind == "purpose":
            with pytest.raises(ProtocolRefusal) as refusal:
                caller.call(GET, {"record_id": record.id, "purpose_ref": "purpose:other"})
            assert refusal.value.code is ProtocolCode.CONTEXT_UNAVAILABLE
            OUTCOMES["refused: purpose"] += 1
            return
        past = [e for e in self.history if e[0] == scope and e[1] in (WITHDRAW, FORGET)]
        tool, args = (
            FORGET,
            {
                "record_id": record.id,
                "idempotency_key": self._key("fresh", pick),
                "reason_ref": "reason:r",
            },
        )
        if past and pick % 2:
            _, tool, args, _ = nth_recent(past, pick)
        if kind == "no_confirmation":
            with pytest.raises(ProtocolRefusal) as refusal:
                caller.call(tool, args)
            assert refusal.value.code is ProtocolCode.CONTEXT_UNAVAILABLE
        else:
            other_target = self._unknown_record() if tool == FORGET else self._unknown_candidate()
            envelope = caller.call(tool, args, caller.confirm(tool, args, other_target))
            self._expect(envelope, Prediction(code="gate_failed"))
        OUTCOMES[f"refused: {kind}"] += 1

    # After every step.

    @invariant()
    def the_store_matches_the_model(self) -> None:
        """Dense cursors: exactly the model's writes in each scope, and nothing else. Every
        candidate and record in the state the model holds, and only in its own scope. One
        audit entry per call, allowed or refused, agent's or operator's."""
        OUTCOMES["(steps)"] += 1
        expected: dict[tuple[str, str], str] = {}
        for model in self.models.values():
            scope_ref = model.spec.scope_ref
            if model.base + model.head:  # an empty journal has no head row
                expected[(scope_ref, "journal head")] = str(model.base + model.head)
            expected.update({(scope_ref, i): r.state for i, r in model.records.items()})
            expected.update({(scope_ref, i): c.state for i, c in model.candidates.items()})
        expected[("audit", "head")] = str(self.audit_head)
        scope_refs = [model.spec.scope_ref for model in self.models.values()]
        ids = [i for _, i in expected]
        with self.services.database.transaction() as tx:
            rows = tx.fetchall(STORE_VIEW, [scope_refs, ids, ids])
        stored = {(scope_ref, i): value for scope_ref, i, value in rows}
        differences = set(stored.items()) ^ set(expected.items())
        assert stored == expected, sorted(differences)


# What the invariant compares with the model, in one query: it runs after every step, and a
# query costs about a millisecond whatever it reads.
STORE_VIEW = """
SELECT 'audit', 'head', CAST(coalesce(max(sequence), 0) AS VARCHAR) FROM audit_entries
UNION ALL
SELECT scope_ref, 'journal head', CAST(max(cursor) AS VARCHAR) FROM journal_events
WHERE list_contains(?, scope_ref) GROUP BY scope_ref
UNION ALL
SELECT scope_ref, record_id, state FROM records WHERE list_contains(?, record_id)
UNION ALL
SELECT scope_ref, candidate_id, state FROM candidates WHERE list_contains(?, candidate_id)
"""
