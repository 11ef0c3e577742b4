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
from engram_memory.store import decision_inputs
from engram_memory.store.connection import load_queries
from engram_memory.store.decision_inputs import KeptDecision
from engram_memory.store.heads import Head
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
    # The inputs and results of `receipts` kept for policy replay (store/decision_inputs.py);
    # empty when the operator keeps none. Bound by the receipts, so not hashed here.
    kept_decisions: Sequence[KeptDecision] = ()


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
    batch = prepare(records, tx.audit_head())  # the writer's head cache, not a query
    batch.insert(tx)
    if batch.rows:
        tx.moved_audit_head(batch.head)
    return batch.hashes()


@dataclass
class AuditBatch:
    """Entries computed and chained, not yet written: each row is the table's columns in
    `insert` order (JSON values only, so the call log can carry a batch as it is); `head` is
    the (sequence, entry hash) after the last row. Batches of consecutive entries merge."""

    head: Head
    rows: list[list[Any]] = field(default_factory=list)
    # (sequence, the five confirmation columns) of entries that spent a confirmation.
    approvals: list[list[Any]] = field(default_factory=list)
    # One list per receipt column, in `insert_receipts` order.
    receipts: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(13)])
    claims: list[list[Any]] = field(default_factory=list)  # (audit id, kept-until ms)
    # One list per kept-decision column (store/decision_inputs.py `insert`).
    inputs: list[list[Any]] = field(
        default_factory=lambda: [[] for _ in range(decision_inputs.COLUMNS)]
    )

    def hashes(self) -> list[str]:
        return [str(row[16]) for row in self.rows]

    def extend(self, later: AuditBatch) -> None:
        """Append a batch prepared after this one (its entries follow these)."""
        self.head = later.head if later.rows else self.head
        self.rows.extend(later.rows)
        self.approvals.extend(later.approvals)
        for column, values in zip(self.receipts, later.receipts, strict=True):
            column.extend(values)
        self.claims.extend(later.claims)
        for column, values in zip(self.inputs, later.inputs, strict=True):
            column.extend(values)

    def insert(self, tx: Transaction, *, claims_sql: str | None = None) -> None:
        """Write the entries, receipts, approvals and claims with at most four statements
        (`claims_sql`: the projection's tolerant form of the claim, store/projection.py).

        Raises:
            StoreUnavailable: a statement failed.
        """
        approvals = self.approvals
        if len(self.rows) == 1 and len(approvals) == 1:  # a confirmed call's own entry
            tx.execute(_Q["insert_one_approved"], [*self.rows[0], *approvals[0][1:]])
            approvals = []
        elif len(self.rows) == 1:
            tx.execute(_Q["insert_one"], self.rows[0])
        elif self.rows:  # column-wise lists, unnested row-wise by the statement
            tx.execute(_Q["insert"], [list(column) for column in zip(*self.rows, strict=True)])
        for approval in approvals:
            tx.execute(_Q["set_approval"], [*approval[1:], approval[0]])
        if self.receipts[0]:
            tx.execute(_Q["insert_receipts"], self.receipts)
        decision_inputs.insert(tx, self.inputs)
        if self.claims:
            tx.execute(
                claims_sql or _Q["claim_audit_ids"],
                [[c[0] for c in self.claims], [c[1] for c in self.claims]],
            )


def prepare(records: Sequence[AuditRecord], head: Head) -> AuditBatch:
    """Compute the entries of `records` following `head`, chained exactly as `verify`
    re-derives them, without writing anything."""
    sequence, previous = head
    batch = AuditBatch(head)
    for record in records:
        sequence += 1
        entry = _entry(record, sequence, previous)
        previous = _entry_hash(entry)
        values: list[Any] = [entry[c] for c in _COLUMNS]
        values[9] = json.dumps(entry["target_ids"])
        values[10] = json.dumps(entry["receipt_digests"])
        batch.rows.append([*values, previous, *_stream_values(record)])
        fields = _approval_fields(record.approval)
        if fields:
            batch.approvals.append([sequence, *fields.values()])
        for receipt in record.receipts:
            for column, value in zip(batch.receipts, _receipt_values(record, receipt), strict=True):
                column.append(value)
        for kept in record.kept_decisions:
            for column, value in zip(batch.inputs, kept.row(record.scope_ref), strict=True):
                column.append(value)
        if record.audit_id_kept_until_ms is not None:
            batch.claims.append([record.audit_id, record.audit_id_kept_until_ms])
    batch.head = (sequence, previous)
    return batch


def _receipt_values(record: AuditRecord, r: DecisionReceipt) -> list[Any]:
    return [
        r.decision_id,
        record.audit_id,
        record.scope_ref,
        r.policy_path,
        r.input_digest,
        r.result_digest,
        r.bundle_revision,
        r.bundle_digest,
        r.engine_id,
        r.engine_version,
        json.dumps(list(r.reasons)),
        r.decided_at_ms,
        r.receipt_digest,
    ]


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


def _stored_approvals(tx: Transaction, after: int = 0) -> dict[int, dict[str, JsonValue]]:
    """The confirmation columns that are set, of every entry with any, by sequence (each
    column joins the hashed entry only when set: a half-erased approval does not verify)."""
    return {
        int(row[0]): {
            column: value
            for column, value in zip(_APPROVAL_COLUMNS, row[1:], strict=True)
            if value is not None
        }
        for row in tx.fetchall(_Q["scan_approvals"], [after])
    }


def verify(tx: Transaction) -> tuple[int, int]:
    """Re-derive the audit chain and every decision receipt, and check every kept decision
    input against its receipt; return (entries, receipts).

    Raises:
        AuditChainBroken: the first defect found.
    """
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
    decision_inputs.verify(tx)
    return _verify_entries(tx, 0, ZERO_DIGEST, known_receipts), receipts


def verify_since(tx: Transaction, sequence: int, entry_hash: str) -> int:
    """Re-derive the entries after `sequence`, the first linked from `entry_hash` (a signed
    checkpoint's head, which the caller has matched with the stored entry); return how many
    were checked. Receipts are left to `verify` (start-up: core/startup_audit.py).

    Raises:
        AuditChainBroken: an entry does not link or re-derive.
    """
    return _verify_entries(tx, sequence, entry_hash, None) - sequence


def _verify_entries(tx: Transaction, after: int, previous: str, known: set[str] | None) -> int:
    """Re-derive the entries after `after`, the first linked from `previous`; return the
    last sequence checked. `known` None: the receipts named are not looked up."""
    approvals = _stored_approvals(tx, after)
    expected = after + 1
    for row in tx.fetchall(_Q["scan"], [after]):
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
        if known is not None and any(d not in known for d in entry["receipt_digests"]):
            raise AuditChainBroken(f"entry {expected} names a receipt that is not stored")
        previous, expected = str(row[16]), expected + 1
    return expected - 1


def prepared_row_hash(row: Sequence[Any], approval: Sequence[Any] = ()) -> str:
    """The `entry_hash` a row of an `AuditBatch` (and the confirmation columns of its entry,
    if any) re-derives to: a call log record's entry checked without the store.

    Raises:
        ValueError / KeyError: the row does not have the batch's shape.
    """
    columns: dict[str, Any] = dict(zip(_COLUMNS, row[:16], strict=True))
    columns["target_ids_json"] = columns.pop("target_ids")
    columns["receipt_digests_json"] = columns.pop("receipt_digests")
    columns.update(zip(_STREAM_COLUMNS, row[17:], strict=True))
    if approval:
        columns.update(zip(_APPROVAL_COLUMNS, approval[1:], strict=True))
    return entry_hash_of_columns(columns)


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
