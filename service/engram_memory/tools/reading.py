"""Eligibility, revalidation and redaction shared by search and get (SPEC §4.1, §4.2, §8)."""

from __future__ import annotations

from dataclasses import dataclass

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import digest
from engram_memory.core import steps
from engram_memory.core.runtime import CallContext
from engram_memory.policy.decider import Redaction
from engram_memory.search.redaction import redact, redaction_receipt_digest
from engram_memory.store import journal, memory
from engram_memory.store.transaction import Transaction


@dataclass(frozen=True)
class AsOf:
    """The pinned pair a read is evaluated at: valid time (epoch ms) and journal cursor."""

    valid_as_of: int
    system_as_of: int


def high_water(tx: Transaction, ctx: CallContext) -> int:
    return journal.head(tx, ctx.scope_ref)[0]


def is_eligible(row: memory.RecordRow, as_of: AsOf, now_ms: int) -> bool:
    """SPEC §8 visibility, everything but the principal check (authz did that)."""
    if row.state != "accepted_current" or row.sealed_body is None:
        return False
    if row.accept_cursor > as_of.system_as_of or row.recorded_cursor > as_of.system_as_of:
        return False
    if not row.valid_t <= as_of.valid_as_of or (
        row.valid_t_end is not None and as_of.valid_as_of > row.valid_t_end
    ):
        return False
    # Expiry is enforced at read time, before any expire event exists.
    return row.expires_at_ms is None or now_ms < row.expires_at_ms


def eligible_row(
    tx: Transaction, ctx: CallContext, record_id: str, as_of: AsOf
) -> memory.RecordRow | None:
    """The record's row if eligible at `as_of`, else None (unknown, foreign, ineligible)."""
    row = memory.get_record(tx, ctx.scope_ref, record_id)
    return row if row is not None and is_eligible(row, as_of, ctx.now_ms) else None


def revalidated_record(
    tx: Transaction, ctx: CallContext, record_id: str, as_of: AsOf
) -> dict[str, JsonValue] | None:
    """The full record if still eligible at `as_of`, else None."""
    row = eligible_row(tx, ctx, record_id, as_of)
    return None if row is None else steps.open_item(ctx, record_id, row.sealed_body)


def redacted_view(
    ctx: CallContext, redaction: Redaction, record: dict[str, JsonValue]
) -> tuple[dict[str, JsonValue], list[str], str]:
    """(redacted record, redacted_fields, redaction_receipt_digest) under `redaction`, the
    allowlist policy decided for this record (tools/record_redaction.py)."""
    view, omitted = redact(record, redaction.allowed_fields, redaction.allow_derivation_lineage)
    receipt = redaction_receipt_digest(
        str(record["record_id"]),
        str(record["record_digest"]),
        ctx.services.decider.expected.revision,
        omitted,
    )
    return view, omitted, receipt


def revalidation_receipt_digest(record_ids: list[str], as_of: AsOf, checked_at: str) -> str:
    return digest(
        "recall-revalidation",
        {
            "record_ids": record_ids,
            "valid_as_of": as_of.valid_as_of,
            "system_as_of": str(as_of.system_as_of),
            "checked_at": checked_at,
        },
    )
