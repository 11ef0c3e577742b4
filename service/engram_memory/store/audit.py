"""The audit trail: one hash-chained entry per tool call, allowed or refused.

Entries hold identifiers and digests only: hashed principal/agent/session, outcome code,
target ids, decision receipt digests, bundle digest, hashed idempotency key. Never memory
content, never raw keys. Receipts are stored beside them so an auditor can re-derive each.

Host-stream entries (scope_ref 'host': refusals before binding) and counted summaries of a
refusal storm carry the optional columns of migration 0006 (`_STREAM_DEFAULTS`); an entry
hashes each only when it differs from its default, so entries written before stay valid.
Every entry bound by an invocation token also records its audit id in `used_audit_ids`
until the token expires, in the same statement batch: the primary key refuses a second
entry with that id (core/replay_guard.py keeps the fast, in-memory side of that rule).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import ZERO_DIGEST, digest
from engram_memory.contract.exceptions import AuditChainBroken
from engram_memory.contract.receipts import DecisionReceipt, receipt_digest_of
from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "audit.sql")
_COLUMNS = (
    "sequence",
    "recorded_at",
    "audit_id",
    "scope_ref",
    "principal_ref",
    "agent_ref",
    "session_ref",
    "tool",
    "outcome",
    "target_ids",
    "receipt_digests",
    "bundle_digest",
    "bundle_revision",
    "idempotency_key_digest",
    "detail",
    "previous_hash",
)
# Migration 0006's columns and the value every entry without them has (not hashed then).
_STREAM_DEFAULTS: dict[str, JsonValue] = {
    "transport": "",
    "peer": "",
    "reason": "",
    "token_digest": "",
    "occurrences": 1,
    "first_at": "",
    "last_at": "",
}
_STREAM_COLUMNS = tuple(_STREAM_DEFAULTS)


@dataclass(frozen=True)
class ApprovalEvidence:
    """Who approved a confirmed call (issue 9 item 4): the host confirmation that released
    its gate. Recorded in the call's audit entry and journal event."""

    approver: str  # `human:<subject>`, validated by host/confirmation.py
    jti: str
    issued_at_s: int
    resolved_at_s: int
    op_digest: str

    def as_json(self) -> dict[str, JsonValue]:
        """The evidence as the journal event of the call carries it."""
        return {
            "approver": self.approver,
            "jti": self.jti,
            "issued_at": self.issued_at_s,
            "resolved_at": self.resolved_at_s,
            "op_digest": self.op_digest,
        }


@dataclass(frozen=True)
class AuditRecord:
    """What the caller knows about one call; the chain fields are added on append."""

    recorded_at: str
    audit_id: str
    scope_ref: str
    principal_ref: str
    agent_ref: str
    session_ref: str
    tool: str
    outcome: str
    bundle_digest: str
    bundle_revision: str
    target_ids: Sequence[str] = ()
    receipts: Sequence[DecisionReceipt] = field(default_factory=tuple)
    idempotency_key_digest: str = ""
    detail: str = ""
    # The confirmation this call spent, if one released its gate (migration 0007).
    approval: ApprovalEvidence | None = None
    # Host stream and counted summaries (migration 0006); defaults are what older entries had.
    transport: str = ""
    peer: str = ""
    reason: str = ""
    token_digest: str = ""
    occurrences: int = 1
    first_at: str = ""
    last_at: str = ""
    # Until when (epoch ms) the audit id stays in `used_audit_ids`: its invocation token's
    # expiry plus the tolerated skew. None for server-made ids (host stream, summaries).
    audit_id_kept_until_ms: int | None = None


def _entry_hash(entry: dict[str, JsonValue]) -> str:
    return digest("audit-entry", entry, field="entry_hash")


def append(tx: Transaction, record: AuditRecord) -> str:
    """Append one entry (and its receipts) in the caller's transaction; return its hash.

    Raises:
        StoreUnavailable: the write failed; the caller must fail the call.
    """
    return append_all(tx, [record])[0]


def append_all(tx: Transaction, records: Sequence[AuditRecord]) -> list[str]:
    """Append entries in order, chained, with two statements whatever their number (a group
    commit writes many); return their hashes.

    Raises:
        StoreUnavailable: the write failed; the caller must fail every call of `records`.
    """
    sequence, previous = tx.audit_head()  # the writer's head cache, not a query
    rows: list[list[object]] = []
    hashes: list[str] = []
    for record in records:
        sequence += 1
        entry = _entry(record, sequence, previous)
        previous = _entry_hash(entry)
        values: list[object] = [entry[c] for c in _COLUMNS]
        values[9] = json.dumps(entry["target_ids"])
        values[10] = json.dumps(entry["receipt_digests"])
        rows.append([*values, previous, *_stream_values(record)])
        hashes.append(previous)
    if not rows:
        return hashes
    if len(rows) == 1:
        tx.execute(_Q["insert_one"], rows[0])
    else:  # column-wise lists, unnested row-wise by the statement
        tx.execute(_Q["insert"], [list(column) for column in zip(*rows, strict=True)])
    tx.moved_audit_head((sequence, previous))
    _record_approvals(tx, records, sequence - len(records) + 1)
    _insert_receipts(tx, records)
    _claim_audit_ids(tx, records)
    return hashes


def _stream_values(record: AuditRecord) -> list[object]:
    return [getattr(record, column) for column in _STREAM_COLUMNS]


def _stream_fields(record: AuditRecord) -> dict[str, JsonValue]:
    """Migration 0006's fields of `record` that differ from their defaults (hashed)."""
    fields: dict[str, JsonValue] = {}
    for column, default in _STREAM_DEFAULTS.items():
        value = getattr(record, column)
        if value != default:
            fields[column] = value
    return fields


def _claim_audit_ids(tx: Transaction, records: Sequence[AuditRecord]) -> None:
    claim_audit_ids(
        tx,
        [
            (r.audit_id, r.audit_id_kept_until_ms)
            for r in records
            if r.audit_id_kept_until_ms is not None
        ],
    )


def claim_audit_ids(tx: Transaction, claims: Sequence[tuple[str, int]]) -> None:
    """Keep each (token-bound audit id, kept-until ms) in `tx`; a second claim of an id still
    kept violates the primary key and fails the transaction (fail closed).

    Raises:
        StoreUnavailable: the statement failed (an id already kept included).
    """
    if not claims:
        return
    tx.execute(
        _Q["claim_audit_ids"], [[audit_id for audit_id, _ in claims], [u for _, u in claims]]
    )


def used_audit_ids(tx: Transaction, now_ms: int) -> list[tuple[str, int]]:
    """The audit ids whose tokens have not expired at `now_ms`, with their expiry.

    Raises:
        StoreUnavailable: the read failed.
    """
    return [(str(r[0]), int(r[1])) for r in tx.fetchall(_Q["used_audit_ids"], [now_ms])]


def prune_used_audit_ids(tx: Transaction, now_ms: int) -> None:
    """Forget the audit ids whose tokens expired before `now_ms` (a token past its expiry
    is refused anyway, so its id needs no guard).

    Raises:
        StoreUnavailable: the statement failed.
    """
    tx.execute(_Q["prune_used_audit_ids"], [now_ms])


def _entry(record: AuditRecord, sequence: int, previous: str) -> dict[str, JsonValue]:
    return _base_entry(record, sequence, previous) | _approval_fields(record.approval)


def _base_entry(record: AuditRecord, sequence: int, previous: str) -> dict[str, JsonValue]:
    return {
        "sequence": sequence,
        "recorded_at": record.recorded_at,
        "audit_id": record.audit_id,
        "scope_ref": record.scope_ref,
        "principal_ref": record.principal_ref,
        "agent_ref": record.agent_ref,
        "session_ref": record.session_ref,
        "tool": record.tool,
        "outcome": record.outcome,
        "target_ids": sorted(record.target_ids),
        "receipt_digests": [r.receipt_digest for r in record.receipts],
        "bundle_digest": record.bundle_digest,
        "bundle_revision": record.bundle_revision,
        "idempotency_key_digest": record.idempotency_key_digest,
        "detail": record.detail,
        "previous_hash": previous,
        **_stream_fields(record),
    }


# The confirmation columns (migration 0007). They join the hashed entry only when a
# confirmation was spent, so every entry written before them re-derives unchanged.
_APPROVAL_COLUMNS = (
    "approver",
    "confirmation_jti",
    "confirmation_issued_at",
    "confirmation_resolved_at",
    "confirmation_op_digest",
)


def _approval_fields(approval: ApprovalEvidence | None) -> dict[str, JsonValue]:
    if approval is None:
        return {}
    values: tuple[JsonValue, ...] = (
        approval.approver,
        approval.jti,
        approval.issued_at_s,
        approval.resolved_at_s,
        approval.op_digest,
    )
    return dict(zip(_APPROVAL_COLUMNS, values, strict=True))


def _record_approvals(tx: Transaction, records: Sequence[AuditRecord], first: int) -> None:
    """Fill the confirmation columns of the entries just appended from `first` on. A separate
    statement: only confirmed (destructive) calls carry them, and it keeps the insert of
    every other entry as it was."""
    for offset, record in enumerate(records):
        fields = _approval_fields(record.approval)
        if fields:
            tx.execute(_Q["set_approval"], [*fields.values(), first + offset])


def _stored_approvals(tx: Transaction) -> dict[int, dict[str, JsonValue]]:
    """The confirmation columns that are set, of every entry with any, by sequence (each
    column joins the hashed entry only when set: a half-erased approval does not verify)."""
    return {
        int(row[0]): {
            column: value
            for column, value in zip(_APPROVAL_COLUMNS, row[1:], strict=True)
            if value is not None
        }
        for row in tx.fetchall(_Q["scan_approvals"])
    }


def _insert_receipts(tx: Transaction, records: Sequence[AuditRecord]) -> None:
    owned = [(record, receipt) for record in records for receipt in record.receipts]
    if not owned:
        return
    receipts = [receipt for _, receipt in owned]
    tx.execute(
        _Q["insert_receipts"],
        [
            [r.decision_id for r in receipts],
            [record.audit_id for record, _ in owned],
            [record.scope_ref for record, _ in owned],
            [r.policy_path for r in receipts],
            [r.input_digest for r in receipts],
            [r.result_digest for r in receipts],
            [r.bundle_revision for r in receipts],
            [r.bundle_digest for r in receipts],
            [r.engine_id for r in receipts],
            [r.engine_version for r in receipts],
            [json.dumps(list(r.reasons)) for r in receipts],
            [r.decided_at_ms for r in receipts],
            [r.receipt_digest for r in receipts],
        ],
    )


def verify(tx: Transaction) -> tuple[int, int]:
    """Re-derive the audit chain and every decision receipt; return (entries, receipts).

    Raises:
        AuditChainBroken: the first defect found.
    """
    previous, expected = ZERO_DIGEST, 1
    known_receipts: set[str] = set()
    receipts = 0
    for row in tx.fetchall(_Q["scan_receipts"]):
        body: dict[str, JsonValue] = {
            "decision_id": row[0],
            "policy_path": row[3],
            "input_digest": row[4],
            "result_digest": row[5],
            "bundle_revision": row[6],
            "bundle_digest": row[7],
            "engine_id": row[8],
            "engine_version": row[9],
            "reasons": json.loads(row[10]),
            "decided_at_ms": int(row[11]),
        }
        if receipt_digest_of(body) != row[12]:
            raise AuditChainBroken(f"receipt {row[0]} does not re-derive")
        known_receipts.add(str(row[12]))
        receipts += 1
    approvals = _stored_approvals(tx)
    for row in tx.fetchall(_Q["scan"]):
        entry: dict[str, JsonValue] = dict(zip(_COLUMNS, row[:16], strict=True))
        entry["sequence"] = int(row[0])
        entry["target_ids"] = json.loads(row[9])
        entry["receipt_digests"] = json.loads(row[10])
        entry.update(approvals.get(int(row[0]), {}))
        for column, value in zip(_STREAM_COLUMNS, row[17:], strict=True):
            if value != _STREAM_DEFAULTS[column]:
                entry[column] = int(value) if column == "occurrences" else value
        if entry["sequence"] != expected or entry["previous_hash"] != previous:
            raise AuditChainBroken(f"gap or broken link at entry {expected}")
        if _entry_hash(entry) != row[16]:
            raise AuditChainBroken(f"entry {expected} hash does not re-derive")
        missing = [d for d in entry["receipt_digests"] if d not in known_receipts]
        if missing:
            raise AuditChainBroken(f"entry {expected} names a receipt that is not stored")
        previous, expected = str(row[16]), expected + 1
    return expected - 1, receipts


def entry_hash_of_columns(row: Mapping[str, Any]) -> str:
    """The `entry_hash` an entry re-derives to from its columns as the table holds them
    (`target_ids_json` / `receipt_digests_json` as JSON text, instants as text): what
    `verify` computes, for an entry read from somewhere else (an auditor's export).

    Raises:
        KeyError / ValueError: a column is missing or its JSON is malformed.
    """
    entry: dict[str, JsonValue] = {
        column: row[column]
        for column in _COLUMNS
        if column not in ("target_ids", "receipt_digests")
    }
    entry["sequence"] = int(row["sequence"])
    entry["target_ids"] = json.loads(row["target_ids_json"])
    entry["receipt_digests"] = json.loads(row["receipt_digests_json"])
    entry.update({c: row[c] for c in _APPROVAL_COLUMNS if row.get(c) is not None})
    for column, default in _STREAM_DEFAULTS.items():
        value = row.get(column, default)
        if value != default:
            entry[column] = int(value) if column == "occurrences" else value
    return _entry_hash(entry)
