"""Eligibility, revalidation and redaction shared by search and get (SPEC §4.1, §4.2, §8)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import digest
from engram_memory.core.runtime import CallContext
from engram_memory.policy.decider import Redaction
from engram_memory.search.redaction import redact, redaction_receipt_digest
from engram_memory.store import memory
from engram_memory.store.transaction import Transaction


@dataclass(frozen=True)
class AsOf:
    """The pinned pair a read is evaluated at: valid time (epoch ms) and journal cursor."""

    valid_as_of: int
    system_as_of: int


def published_as_of(ctx: CallContext) -> AsOf:
    """Now, at the scope's journal head as last published (no statement). Taken before the
    rows are looked up: a row published after it (by a later commit) is then not eligible
    at it, and a row evicted after it was eligible at it."""
    database = ctx.services.database
    database.read_from_memory()  # a read is in flight (`Snapshot` may never begin one)
    _, heads = database.heads()
    return AsOf(ctx.now_ms, heads.journal_head(ctx.scope_ref)[0])


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


def current_rows(
    ctx: CallContext, record_ids: Sequence[str], snapshot: Callable[[], Transaction]
) -> dict[str, memory.RecordRow]:
    """The committed rows of `record_ids` in the caller's scope (absent: unknown, foreign or
    not eligible by state): from the read cache (store/read_cache.py), the rest read from
    `snapshot()` (a read transaction, opened only when something missed) and kept."""
    cache = ctx.services.database.read_cache
    rows: dict[str, memory.RecordRow] = {}
    missing: list[str] = []
    for record_id in record_ids:
        row = cache.lookup(ctx.scope_ref, record_id)
        if row is None:
            missing.append(record_id)
        else:
            rows[record_id] = row
    if missing:
        version = cache.version()  # before the snapshot begins (`RecordCache.fill`)
        tx = snapshot()
        if len(missing) == 1:
            one = memory.get_record(tx, ctx.scope_ref, missing[0])
            read = {} if one is None else {missing[0]: one}
        else:
            read = memory.get_records_by_id(tx, ctx.scope_ref, missing)
        for record_id, row in read.items():
            cache.fill(ctx.scope_ref, row, version)
            rows[record_id] = row
    return rows


class Snapshot:
    """A read transaction begun only if a step needs the store (a cache miss, the slower
    ranking path), then shared by every later step of the call; ended on exit."""

    def __init__(self, ctx: CallContext) -> None:
        self._database = ctx.services.database
        self._stack = ExitStack()
        self._tx: Transaction | None = None

    def __call__(self) -> Transaction:
        if self._tx is None:
            self._tx = self._stack.enter_context(self._database.reading(audit_complete=False))
        return self._tx

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


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
