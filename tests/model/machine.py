"""The state machine: random sequences of the six tools over two tenants, each step checked
against the model (tests/model/model.py) and folded into it.

Two callers: user:alice in acme/support and user:carol in globex/main, both with all six
tools. Ids the service hands out go to bundles; later steps act on them from their own
scope or, now and then, from the other tenant's (`foreign`), where they must not exist.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
)

from engram_memory.contract.errors import ProtocolCode, ProtocolRefusal
from engram_memory.store import journal
from engram_memory.tools.dispatch import MemoryService
from tests.harness import Caller
from tests.model.checks import OUTCOMES, check_body, check_new_ids, count, expect, matches
from tests.model.model import (
    ADMIT,
    CAPTURE,
    CONTENT_KINDS,
    FORGET,
    GET,
    GLOBEX,
    PURPOSE,
    SEARCH,
    SPECS,
    WITHDRAW,
    Prediction,
    ScopeModel,
    capture_arguments,
    content_token,
    record_id_for,
)
from tests.model.stores import Stores

scopes = st.sampled_from(["acme", "globex"])
picks = st.integers(min_value=0, max_value=7)
key_modes = st.sampled_from(["fresh", "fresh", "fresh", "reuse"])
# For request_admission, withdraw and forget: "retry" repeats the call at once.
transition_key_modes = st.sampled_from(["fresh", "fresh", "fresh", "reuse", "retry"])
reasons = st.sampled_from(["reason:r", "reason:s"])
contents = st.integers(min_value=0, max_value=2)
evidences = st.sampled_from(["ticket", "ticket", "untrusted", "review"])
foreign = st.sampled_from([False, False, False, False, True])  # True: call from the other tenant


@dataclass(frozen=True)
class Ref:
    """An id the service handed out, and the scope it belongs to."""

    scope: str
    id: str


T = TypeVar("T")
candidates = Bundle("candidates")
records = Bundle("records")
forgotten = Bundle("forgotten")


def _pick(items: list[T], n: int) -> T:
    """The n-th most recent item (retries and follow-ups mostly concern recent ones)."""
    return items[-1 - n % len(items)]


class LifecycleMachine(RuleBasedStateMachine):
    # Bound by the test: where services come from, and the first error object seen per code
    # (every later one must be byte-identical: constant messages, foreign = unknown).
    stores: ClassVar[Stores]
    error_objects: ClassVar[dict[str, str]]

    def __init__(self) -> None:
        super().__init__()
        self.services = self.stores.next()
        alice = Caller(MemoryService(self.services))
        self.callers = {
            "acme": alice,
            "globex": alice.as_(
                tenant=GLOBEX.tenant, workspace=GLOBEX.workspace, principal=GLOBEX.principal
            ),
        }
        self.word = f"zq{uuid.uuid4().hex[:12]}"
        self.at_ms = self.services.clock_ms() - 60_000
        with self.services.database.transaction() as tx:
            self.models = {
                name: ScopeModel(spec, journal.head(tx, spec.scope_ref)[0])
                for name, spec in SPECS.items()
            }
        self.issued_keys: list[str] = []
        self.history: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
        self.seen_ids: set[str] = set()
        self.counter = 0

    # Helpers.

    def _fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.word}-{self.counter:04d}"

    def _key(self, mode: str, pick: int) -> str:
        if mode == "reuse" and self.issued_keys:
            return _pick(self.issued_keys, pick)
        key = self._fresh("key")
        self.issued_keys.append(key)
        return key

    def _unknown_candidate(self) -> str:
        return "candidate_" + hashlib.sha256(self._fresh("c").encode()).hexdigest()

    def _unknown_record(self) -> str:
        return record_id_for("sha256:" + hashlib.sha256(self._fresh("r").encode()).hexdigest())

    @staticmethod
    def _other(scope: str) -> str:
        return "globex" if scope == "acme" else "acme"

    def _aim(self, ref: Ref, foreign: bool) -> str:
        """The scope a call on `ref` is made in: its own, or the other tenant's."""
        return self._other(ref.scope) if foreign else ref.scope

    def _expect(self, envelope: dict[str, Any], prediction: Prediction) -> dict[str, Any] | None:
        return expect(envelope, prediction, self.error_objects)

    def _check_body(self, scope: str, record: dict[str, Any], content: int) -> None:
        check_body(record, self.models[scope].spec.scope_ref, self.word, content)

    def _mutate(
        self,
        scope: str,
        tool: str,
        args: dict[str, Any],
        meta: dict[str, Any],
    ) -> tuple[dict[str, Any] | None, bool]:
        """Call a mutation, check it against the model's prediction, fold a fresh success
        into the model. Returns (value, fresh)."""
        model, caller = self.models[scope], self.callers[scope]
        prediction = model.predict(tool, args, meta)
        confirmation = None
        if tool in (WITHDRAW, FORGET):
            target = args["candidate_id"] if tool == WITHDRAW else args["record_id"]
            confirmation = caller.confirm(tool, args, target)
        value = self._expect(caller.call(tool, args, confirmation), prediction)
        count(tool, prediction)
        fresh = value is not None and prediction.replay is None
        if value is not None and fresh:
            check_new_ids(tool, value, self.seen_ids)
            model.apply(tool, args, meta, value)
            self.history.append((scope, tool, args, meta))
        return value, fresh

    # Rules: the four mutations. Ids the service hands out go to bundles, so later steps
    # act on them, from their own scope or from the other tenant's.

    def _capture(self, scope: str, content: int, evidence: str, key: str) -> str | None:
        args = capture_arguments(self.word, content, evidence, key, self.at_ms)
        value, fresh = self._mutate(
            scope, CAPTURE, args, {"content": content, "evidence": evidence}
        )
        return str(value["candidate_id"]) if value is not None and fresh else None

    def _transition(
        self, scope: str, tool: str, args: dict[str, Any], key_mode: str
    ) -> tuple[dict[str, Any] | None, bool]:
        """Call; with key mode "retry", call again as a client whose answer was lost would:
        same arguments (a fresh confirmation), so a replay or the same refusal."""
        value, fresh = self._mutate(scope, tool, args, {})
        if key_mode == "retry":
            self._mutate(scope, tool, args, {})
        return value, fresh

    def _admit(self, scope: str, candidate_id: str, key: str, key_mode: str = "fresh") -> Any:
        args = {"candidate_id": candidate_id, "idempotency_key": key}
        value, fresh = self._transition(scope, ADMIT, args, key_mode)
        if value is not None and fresh and value["outcome"]["status"] == "accepted":
            return Ref(scope, str(value["outcome"]["record_id"]))
        return multiple()

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

    @rule(
        target=records,
        scope=scopes,
        content=contents,
        evidence=st.sampled_from(["ticket", "ticket", "ticket", "untrusted", "review"]),
    )
    def capture_then_admit(self, scope: str, content: int, evidence: str) -> Any:
        """The usual agent flow in one step, mostly with ticket evidence, so sequences
        reach records (and the tombstoned-content guard) sooner."""
        candidate_id = self._capture(scope, content, evidence, self._key("fresh", 0))
        assert candidate_id is not None
        return self._admit(scope, candidate_id, self._key("fresh", 0))

    @rule(target=records, record=forgotten, foreign=foreign)
    def recapture(self, record: Ref, foreign: bool) -> Any:
        """Capture a forgotten record's content again, with ticket evidence, and ask for
        admission: held in its own scope (the guard), accepted in the other tenant's unless
        that one forgot identical content too."""
        content = self.models[record.scope].records[record.id].content
        scope = self._aim(record, foreign)
        candidate_id = self._capture(scope, content, "ticket", self._key("fresh", 0))
        assert candidate_id is not None
        return self._admit(scope, candidate_id, self._key("fresh", 0))

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
        self._transition(self._aim(candidate, foreign), WITHDRAW, args, key_mode)

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
        _, fresh = self._transition(scope, FORGET, args, key_mode)
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
            stray = _pick(known, pick) if pick % 2 and known else self._unknown_candidate()
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
            _, tool, args, meta = _pick(past, pick)
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
        OUTCOMES[f"get: {'ok' if visible else 'NOT_FOUND'}"] += 1
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
            _, tool, args, _ = _pick(past, pick)
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
    def journals_match_the_model(self) -> None:
        """Dense cursors: exactly the model's writes, in each scope, and nothing else."""
        OUTCOMES["(steps)"] += 1
        with self.services.database.transaction() as tx:
            for model in self.models.values():
                assert journal.head(tx, model.spec.scope_ref)[0] == model.base + model.head
