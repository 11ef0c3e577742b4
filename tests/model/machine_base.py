"""What every rule of the state machine shares: the services of one sequence, its callers and
operators, the model of each scope, the bundles of ids, and the helpers that aim a call.

The rules are split by who calls: host operators in tests/model/admin_rules.py
(`MaintenanceRules`, over `MachineBase`), the six tools in tests/model/machine.py
(`LifecycleMachine`, over both).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, multiple

from engram_memory.admin.maintenance import MaintenanceService, Operator
from engram_memory.contract.exceptions import ToolError
from engram_memory.store import journal
from engram_memory.tools.dispatch import MemoryService
from tests.harness import Caller
from tests.model.checks import OUTCOMES, check_body, check_fields, check_new_ids, count, expect
from tests.model.maintenance_model import MaintainedScopeModel
from tests.model.model import Prediction
from tests.model.scopes import (
    ADMIT,
    CAPTURE,
    FORGET,
    GLOBEX,
    SPECS,
    WITHDRAW,
    capture_arguments,
    record_id_for,
)
from tests.model.stores import StoreClock, Stores

scopes = st.sampled_from(["acme", "globex"])
picks = st.integers(min_value=0, max_value=7)
reasons = st.sampled_from(["reason:r", "reason:s"])
foreign = st.sampled_from([False, False, False, False, True])  # True: call from the other tenant


@dataclass(frozen=True)
class Ref:
    """An id the service handed out, and the scope it belongs to."""

    scope: str
    id: str


READER = "human:erin"  # read-only in acme, unknown to globex
STRANGER = "human:mallory"  # unknown to both
AdminCall = Callable[[Operator], dict[str, Any]]
Predict = Callable[[MaintainedScopeModel, str], Prediction]  # (acting scope's model, human)

T = TypeVar("T")
candidates = Bundle("candidates")
records = Bundle("records")
forgotten = Bundle("forgotten")


def nth_recent(items: list[T], n: int) -> T:
    """The n-th most recent item (retries and follow-ups mostly concern recent ones)."""
    return items[-1 - n % len(items)]


@dataclass
class ClockedCaller(Caller):
    """A caller whose invocation tokens and confirmations are minted at the store's clock,
    which sequences move forward (a token minted by the wall clock would look stale)."""

    clock: StoreClock | None = None
    # Every call, shared by the callers derived with `as_`: each writes one audit entry.
    calls: list[str] = field(default_factory=list)

    def call(
        self, tool: str, arguments: dict[str, Any], confirmation: object = None, **claims: Any
    ) -> dict[str, Any]:
        self.calls.append(tool)
        return super().call(tool, arguments, confirmation, **claims)

    def token(self, **overrides: Any) -> str:
        assert self.clock is not None
        overrides.setdefault("now_s", self.clock() // 1000)
        return super().token(**overrides)

    def confirm(self, tool: str, arguments: dict[str, Any], target: str, **overrides: Any) -> str:
        assert self.clock is not None
        overrides.setdefault("now_s", self.clock() // 1000)
        return super().confirm(tool, arguments, target, **overrides)


class MachineBase(RuleBasedStateMachine):
    # Bound by the test: where services come from, and the first error object seen per code
    # (every later one must be byte-identical: constant messages, foreign = unknown).
    stores: ClassVar[Stores]
    error_objects: ClassVar[dict[str, str]]

    def __init__(self) -> None:
        super().__init__()
        self.services = self.stores.next()
        self.clock = self.stores.clock
        alice = ClockedCaller(MemoryService(self.services), clock=self.clock)
        self.callers = {
            "acme": alice,
            "globex": alice.as_(
                tenant=GLOBEX.tenant, workspace=GLOBEX.workspace, principal=GLOBEX.principal
            ),
        }
        self.admin = MaintenanceService(self.services)
        self.word = f"zq{uuid.uuid4().hex[:12]}"
        self.at_ms = self.clock() - 60_000
        with self.services.database.transaction() as tx:
            self.models = {
                name: MaintainedScopeModel(
                    spec,
                    journal.head(tx, spec.scope_ref)[0],
                    forgotten_key=self.services.root_key.forgotten_digest_key(spec.scope_ref),
                )
                for name, spec in SPECS.items()
            }
            self.audit_base = int(tx.fetchone("SELECT max(sequence) FROM audit_entries")[0] or 0)
        self.operator_calls = 0  # each writes one audit entry too
        # Earlier sequences captured before `started_ms`; this one captures a second later at
        # the earliest, so its records expire a second after theirs (see `_catch_up`).
        self.started_ms = self.clock()
        self.clock.advance(1_000)
        self.caught_up = False
        self.issued_keys: list[str] = []
        self.history: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
        self.seen_ids: set[str] = set()
        self.counter = 0

    @property
    def audit_head(self) -> int:
        """The audit sequence once every call so far wrote its one entry (DESIGN, Audit)."""
        return self.audit_base + len(self.callers["acme"].calls) + self.operator_calls

    def _fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.word}-{self.counter:04d}"

    def _key(self, mode: str, n: int) -> str:
        if mode == "reuse" and self.issued_keys:
            return nth_recent(self.issued_keys, n)
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

    # Agent calls, for the rules of both kinds.

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

    def _capture(self, scope: str, content: int, evidence: str, key: str) -> str | None:
        args = capture_arguments(self.word, content, evidence, key, self.at_ms)
        value, fresh = self._mutate(
            scope, CAPTURE, args, {"content": content, "evidence": evidence}
        )
        return str(value["candidate_id"]) if value is not None and fresh else None

    def _agent_transition(
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
        value, fresh = self._agent_transition(scope, ADMIT, args, key_mode)
        if value is not None and fresh and value["outcome"]["status"] == "accepted":
            return Ref(scope, str(value["outcome"]["record_id"]))
        return multiple()

    def _capture_then_admit(self, scope: str, content: int, evidence: str) -> Any:
        """The usual agent flow: the new record's Ref if admission accepted it."""
        candidate_id = self._capture(scope, content, evidence, self._key("fresh", 0))
        assert candidate_id is not None
        return self._admit(scope, candidate_id, self._key("fresh", 0))

    # Operator calls, for the rules of both kinds.

    def _operator(self, scope: str, actor: str) -> tuple[str, Operator]:
        """The scope the actor is bound to (the other tenant's for `foreign`), and who."""
        if actor == "foreign":
            scope = self._other(scope)
        spec = SPECS[scope]
        human = {"reader": READER, "stranger": STRANGER}.get(actor)
        if human is None:
            human = next(h for h, held in spec.operators if "maintain" in held)
        return scope, Operator(spec.tenant, spec.workspace, human)

    def _maintain(
        self,
        home: str,
        actor: str,
        operation: str,
        predict: Predict,
        call: AdminCall,
        note: str = "",
    ) -> tuple[MaintainedScopeModel, dict[str, Any] | None]:
        """`actor` calls about `home`'s ids, from the scope it is bound to: check the answer
        and its one audit entry against what that scope's model predicts. Returns that
        model, and the output of a success (None for a refusal)."""
        scope, operator = self._operator(home, actor)
        acting = self.models[scope]
        prediction = predict(acting, operator.operator)
        audit_before = self.audit_head
        value: dict[str, Any] | None = None
        refused: str | None = None
        self.operator_calls += 1
        try:
            value = call(operator)
        except ToolError as error:
            refused = error.code.name
        assert refused == prediction.code, (operation, prediction, refused, value)
        if value is not None:
            check_fields(value, prediction)
        with self.services.database.transaction() as tx:
            entries = tx.fetchall(
                "SELECT tool, outcome, scope_ref FROM audit_entries WHERE sequence > ?",
                [audit_before],
            )
        outcome = prediction.code or "ok"
        assert entries == [(f"admin:{operation}", outcome, acting.spec.scope_ref)], entries
        note += prediction.note + (" (foreign)" if scope != home else "")
        OUTCOMES[f"admin {operation}: {outcome}{note}"] += 1
        return acting, value
