"""The projection: DuckDB following the call log (store/call_log.py) in batches.

A call whose only write is its audit entry (a read, a replay, a refusal) commits by appending
one record to the call log: once `append` returns, the record is durable and the call may be
answered. The record stays here, in memory, until the next projection writes it and every
other pending record into DuckDB with one statement per table and moves
`call_log_projection.position` in the same transaction; only after that COMMIT may the log
release the segments it covers. A crash anywhere leaves either the rows and the position or
neither, so the next start replays exactly the records after the position, once.

A COMMIT whose outcome is unknown leaves the records pending and marks the position as unsure:
the next projection reads it back in its own transaction and drops what is already there
(`write_pending`), so nothing is written twice.

Records are JSON (`LoggedCall.encode`): the audit rows as `audit.prepare` computed them (the
chain hashes included, so replay writes exactly what was acknowledged), their receipts, the
audit ids they claim and the pruning they asked for.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engram_memory.contract.exceptions import StoreCorrupt
from engram_memory.store import audit, decision_inputs
from engram_memory.store.call_log import CallLog
from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "projection.sql")
_FORMAT = 1
# Pending records kept in memory before an append projects them itself (bounded memory; a
# record of a read is ~2-5 KB with its kept decision inputs).
DEFAULT_PENDING_BOUND = 256
log = logging.getLogger("engram_memory.store")


@dataclass
class LoggedCall:
    """What one log record writes: audit entries (with receipts and claims) and a pruning."""

    batch: audit.AuditBatch
    prune_before_ms: int | None = None

    def encode(self) -> bytes:
        b = self.batch
        body = {
            "format": _FORMAT,
            "head": list(b.head),
            "rows": b.rows,
            "approvals": b.approvals,
            "receipts": b.receipts,
            "claims": b.claims,
            "inputs": b.inputs,
            "prune_before_ms": self.prune_before_ms,
        }
        return json.dumps(body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, payload: bytes) -> LoggedCall:
        """Raises: StoreCorrupt: not a record this build writes (its MAC verified, so this is
        a record of another format, never a torn one)."""
        try:
            body = json.loads(payload)
            if not isinstance(body, dict) or body.get("format") != _FORMAT:
                raise ValueError("format")
            sequence, entry_hash = body["head"]
            batch = audit.AuditBatch(
                (int(sequence), str(entry_hash)),
                _rows(body["rows"]),
                _rows(body["approvals"]),
                _rows(body["receipts"]),
                _rows(body["claims"]),
            )
            # Records written before decision inputs were kept (migration 0010) have none.
            if "inputs" in body:
                batch.inputs = _rows(body["inputs"])
            prune = body["prune_before_ms"]
            if (
                len(batch.receipts) != 13
                or len(batch.inputs) != decision_inputs.COLUMNS
                or not (prune is None or isinstance(prune, int))
            ):
                raise ValueError("shape")
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreCorrupt("call log: a record is not in a known format") from exc
        return cls(batch, prune)


def _rows(value: Any) -> list[list[Any]]:
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise ValueError("rows")
    return value


def read_position(tx: Transaction) -> int:
    """The last log sequence projected into this file (0: none).

    Raises:
        StoreUnavailable: the read failed.
    """
    row = tx.fetchone(_Q["position"])
    return 0 if row is None else int(row[0])


def reset_position(tx: Transaction) -> None:
    """Start over with an empty log (a store restored from a backup gets a new log)."""
    tx.execute(_Q["set_position"], [0])


class Projection:
    """The records appended and not yet projected, in log order, and where DuckDB stands."""

    def __init__(self, log_: CallLog, position: int, *, bound: int = DEFAULT_PENDING_BOUND) -> None:
        self._log = log_
        self._lock = threading.Lock()
        self._pending: list[tuple[int, LoggedCall]] = []
        self.position = position
        self._bound = bound
        self._unsure = False  # a projection's COMMIT outcome is unknown

    @property
    def log(self) -> CallLog:
        return self._log

    def append(self, call: LoggedCall) -> int:
        """Make `call` durable in the log and queue it; return its sequence. The caller
        serializes appends with every writing transaction (the chain order).

        Raises:
            StoreUnavailable: it was not made durable (nothing is queued).
        """
        sequence = self._log.append([call.encode()])
        self.queue(sequence, call)
        return sequence

    def queue(self, sequence: int, call: LoggedCall) -> None:
        with self._lock:
            self._pending.append((sequence, call))

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def first_audit_row(self) -> list[Any] | None:
        """The first pending audit row (its sequence and previous hash tell what it follows)."""
        with self._lock:
            return next((c.batch.rows[0] for _, c in self._pending if c.batch.rows), None)

    def audit_hash(self, sequence: int) -> str | None:
        """The entry hash of pending audit entry `sequence`, None if none is pending."""
        with self._lock:
            for _, call in self._pending:
                for row in call.batch.rows:
                    if row[0] == sequence:
                        return str(row[16])
        return None

    def full(self) -> bool:
        return self.pending() >= self._bound

    def half_full(self) -> bool:
        """The background projector does not wait for a pause beyond this."""
        return self.pending() * 2 >= self._bound

    def pending_tools(self) -> frozenset[str]:
        """The tools whose audit entries are pending (the fault suite's probes)."""
        with self._lock:
            return frozenset(str(row[7]) for _, c in self._pending for row in c.batch.rows)

    def write_pending(self, tx: Transaction) -> int | None:
        """Write every pending record into `tx` and move the position with them; return the
        new position (None: nothing to write). Called with the writer's lock held.

        Raises:
            StoreUnavailable: a statement failed (the records stay pending).
        """
        if self._unsure:
            self.committed(read_position(tx))
            self._unsure = False
        with self._lock:
            pending = list(self._pending)
        if not pending:
            return None
        batch = audit.AuditBatch(pending[0][1].batch.head)
        prunes: list[int] = []
        for _, call in pending:
            batch.extend(call.batch)
            if call.prune_before_ms is not None:
                prunes.append(call.prune_before_ms)
        batch.claims = _latest_claims(batch.claims)
        batch.insert(tx, claims_sql=_Q["claim_audit_ids"])
        if prunes:  # an expired id needs no guard whenever it goes: the latest instant
            audit.prune_used_audit_ids(tx, max(prunes))
        position = pending[-1][0]
        tx.execute(_Q["set_position"], [position])
        return position

    def committed(self, position: int) -> None:
        """The records up to `position` are durable in DuckDB: drop them and let the log
        release their segments."""
        with self._lock:
            self._pending = [(s, c) for s, c in self._pending if s > position]
            self.position = max(self.position, position)
        self._log.release_through(position)

    def outcome_unknown(self) -> None:
        """A projection's COMMIT may or may not have landed: read the position back first."""
        self._unsure = True


def _latest_claims(claims: Iterable[list[Any]]) -> list[list[Any]]:
    """One claim per audit id (one statement may not insert a key twice), the latest expiry."""
    latest: dict[str, int] = {}
    for audit_id, until in claims:
        latest[str(audit_id)] = max(int(until), latest.get(str(audit_id), int(until)))
    return [[audit_id, until] for audit_id, until in latest.items()]
