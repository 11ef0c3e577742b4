"""Decision inputs kept for policy replay (migration 0010): each decision's input and result
beside its receipt, for as long as the operator's retention says
(ENGRAM_DECISION_INPUT_RETENTION_DAYS; 0 keeps none).

Why they may be kept: a decision input holds ids, digests and classifier names, never memory
content (policy/decisions.py). Why the chain needs no change: the receipt, which the audit
chain binds, already carries `input_digest` and `result_digest`, so a kept row is checked
against its receipt (`verify`) and a row pruned (`prune`) leaves every receipt and entry as
it was. A replay (admin/policy_replay.py) reports a receipt without its row as pruned.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from engram_memory.contract.exceptions import AuditChainBroken
from engram_memory.contract.receipts import input_digest_of, result_digest_of
from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "decision_inputs.sql")
COLUMNS = 6  # the `insert` statement's lists


@dataclass(frozen=True)
class KeptDecision:
    """One decision's input and result as canonical JSON text (already normalized: the
    texts re-derive the receipt's digests)."""

    decision_id: str
    policy_path: str
    decided_at_ms: int
    input_json: str
    result_json: str

    def row(self, scope_ref: str) -> list[object]:
        return [
            self.decision_id,
            scope_ref,
            self.policy_path,
            self.decided_at_ms,
            self.input_json,
            self.result_json,
        ]


def insert(tx: Transaction, columns: list[list[object]]) -> None:
    """Write kept decisions given as `COLUMNS` parallel lists, with one statement.

    Raises:
        StoreUnavailable: the statement failed.
    """
    if columns and columns[0]:
        tx.execute(_Q["insert"], columns)


def verify(tx: Transaction) -> int:
    """Check every kept decision against the receipt that names it; return how many.

    Raises:
        AuditChainBroken: a kept row names no receipt, or its input or result does not
            re-derive the receipt's digest (it was altered).
    """
    checked = 0
    for decision_id, input_json, result_json, input_d, result_d, same in tx.fetchall(_Q["bound"]):
        if input_d is None or not same:
            raise AuditChainBroken(f"kept input {decision_id} has no matching receipt")
        try:
            input_ok = input_digest_of(json.loads(str(input_json))) == input_d
            result_ok = result_digest_of(json.loads(str(result_json))) == result_d
        except ValueError as exc:  # not JSON: altered
            raise AuditChainBroken(f"kept input {decision_id} is not JSON") from exc
        if not (input_ok and result_ok):
            raise AuditChainBroken(f"kept input {decision_id} does not re-derive its receipt")
        checked += 1
    return checked


def prune(tx: Transaction, before_ms: int) -> int:
    """Forget the kept decisions made before `before_ms`; return how many went.

    Raises:
        StoreUnavailable: the statement failed.
    """
    row = tx.fetchone(_Q["count_before"], [before_ms])
    tx.execute(_Q["prune"], [before_ms])
    return 0 if row is None else int(row[0])


@dataclass(frozen=True)
class RecordedDecision:
    """A receipt in a replay's window, with its kept input and result (None: not kept)."""

    decision_id: str
    audit_id: str
    scope_ref: str
    policy_path: str
    decided_at_ms: int
    bundle_revision: str
    input_json: str | None
    result_json: str | None


def count_recorded(tx: Transaction, from_ms: int, to_ms: int) -> int:
    """How many receipts were decided in [from_ms, to_ms).

    Raises:
        StoreUnavailable: the read failed.
    """
    row = tx.fetchone(_Q["count_window"], [from_ms, to_ms])
    return 0 if row is None else int(row[0])


def recorded(tx: Transaction, from_ms: int, to_ms: int) -> Iterator[RecordedDecision]:
    """The receipts decided in [from_ms, to_ms), oldest first.

    Raises:
        StoreUnavailable: the read failed.
    """
    for row in tx.fetchall(_Q["replayable"], [from_ms, to_ms]):
        yield RecordedDecision(
            decision_id=str(row[0]),
            audit_id=str(row[1]),
            scope_ref=str(row[2]),
            policy_path=str(row[3]),
            decided_at_ms=int(row[4]),
            bundle_revision=str(row[5]),
            input_json=None if row[6] is None else str(row[6]),
            result_json=None if row[7] is None else str(row[7]),
        )
