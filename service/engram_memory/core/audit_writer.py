"""Group commit for the audit entries of reads, replays and refusals.

Those calls write nothing but their audit entry. Each used to take the writer for a
transaction of its own (BEGIN, append, COMMIT with its fsync); under concurrent calls they now
share one: the first caller to arrive leads, appends every entry waiting at that moment in one
transaction, commits once, and only then releases the callers it wrote for. No caller returns
before its entry is durable, so no acknowledged call lacks its entry; if the transaction fails,
every caller of that batch fails (fail closed) and none of their entries exists.

Entries made without a call (the host stream, refusal summaries: core/refusal_stream.py)
join the same batches through `write_records`.

With the store's call log attached, a batch commits by one append to the log (durable and
anchored before anyone is released) and DuckDB follows later (store/projection.py): a read
takes no write transaction. A batch holding an entry that spends a confirmation keeps the
transaction, which must see that the confirmation is still unused.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from engram_memory.contract.exceptions import StoreUnavailable
from engram_memory.core import steps
from engram_memory.core.call_audit import AuditFacts
from engram_memory.core.runtime import CallContext
from engram_memory.store import audit
from engram_memory.store.database import Database

log = logging.getLogger("engram_memory.calls")


@dataclass
class _Entry:
    # A call's entry, or entries made without a call (`records`, with audit ids to claim).
    call: tuple[CallContext, AuditFacts] | None
    records: Sequence[audit.AuditRecord] = ()
    claims: Sequence[tuple[str, int]] = ()
    # Forget the audit ids kept until before this instant (store/audit.py).
    prune_before_ms: int | None = None
    done: threading.Event = field(default_factory=threading.Event)
    # The facts written (its outcome may have become gate_failed), or None if none were.
    written: AuditFacts | None = None
    committed: bool = False
    # Set when the previous leader hands the next batch to this caller.
    leads: bool = False


class AuditGroupWriter:
    """Leader/follower group commit over the one writer (no background thread)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._state = threading.Lock()
        self._waiting: list[_Entry] = []
        self._leading = False

    def write(self, ctx: CallContext, facts: AuditFacts) -> AuditFacts | None:
        """Append the entry of the call bound in `ctx` durably; return the facts written (a
        confirmation consumed meanwhile by another call turns them into gate_failed,
        `steps.write_audits`), or None if the entry was not written."""
        entry = self._join(_Entry((ctx, facts)))
        return entry.written

    def write_records(
        self,
        records: Sequence[audit.AuditRecord],
        claims: Sequence[tuple[str, int]] = (),
        *,
        prune_before_ms: int | None = None,
    ) -> bool:
        """Append entries made without a call, keep the (audit id, kept-until ms) of
        `claims` (store/audit.py `claim_audit_ids`) and, with `prune_before_ms`, forget the
        ids kept until before it, durably; False if none of it was written."""
        return self._join(_Entry(None, records, claims, prune_before_ms)).committed

    def _join(self, entry: _Entry) -> _Entry:
        with self._state:
            self._waiting.append(entry)
            entry.leads = not self._leading
            self._leading = True
        if not entry.leads:
            entry.done.wait()
            if not entry.leads:
                return entry
        self._lead()
        return entry

    def _lead(self) -> None:
        with self._state:
            batch, self._waiting = self._waiting, []
        written = self._commit(batch)
        calls = iter(written or ())
        for entry in batch:
            entry.committed = written is not None
            if written is not None and entry.call is not None:
                entry.written = next(calls)
        with self._state:
            successor = self._waiting[0] if self._waiting else None
            if successor is None:
                self._leading = False
            else:
                successor.leads = True
        for entry in batch:
            entry.done.set()
        if successor is not None:
            successor.done.set()

    def _commit(self, batch: list[_Entry]) -> list[AuditFacts] | None:
        calls = [entry.call for entry in batch if entry.call is not None]
        if self._database.logs_calls and all(f.confirmation is None for _, f in calls):
            return self._append(batch, calls)
        try:
            with self._database.transaction() as tx:
                written = steps.write_audits(
                    tx,
                    [entry.call for entry in batch if entry.call is not None],
                    [record for entry in batch for record in entry.records],
                )
                audit.claim_audit_ids(tx, [claim for entry in batch for claim in entry.claims])
                prunes = [e.prune_before_ms for e in batch if e.prune_before_ms is not None]
                if prunes:
                    audit.prune_used_audit_ids(tx, min(prunes))
        except Exception as exc:  # noqa: BLE001 - every waiting caller must be released
            # StoreUnavailable is the expected case; anything else must not strand followers.
            if not isinstance(exc, StoreUnavailable):
                log.error("unexpected %s in the audit group commit", type(exc).__name__)
            log.error("audit write failed entries=%d", len(batch))
            return None
        return written

    def _append(
        self, batch: list[_Entry], calls: list[tuple[CallContext, AuditFacts]]
    ) -> list[AuditFacts] | None:
        """Commit an audit-only batch through the call log (see the module docstring)."""
        prunes = [e.prune_before_ms for e in batch if e.prune_before_ms is not None]
        try:
            self._database.append_logged(
                [
                    *(steps.audit_record(ctx, facts) for ctx, facts in calls),
                    *(record for entry in batch for record in entry.records),
                ],
                [claim for entry in batch for claim in entry.claims],
                min(prunes) if prunes else None,
            )
        except Exception as exc:  # noqa: BLE001 - every waiting caller must be released
            if not isinstance(exc, StoreUnavailable):
                log.error("unexpected %s in the audit group commit", type(exc).__name__)
            log.error("audit write failed entries=%d", len(batch))
            return None
        for ctx, _ in calls:
            ctx.services.settings.failpoints.kill_after_log_append(ctx.tool)
        return [facts for _, facts in calls]
