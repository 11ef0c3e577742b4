"""The call log side of the writer (`Database`): audit-only calls commit by appending to the
call log (store/call_log.py) instead of a DuckDB transaction; the file follows in batches
(store/projection.py, which says why a crash at any point loses and repeats nothing).

Every append runs under the chain lock, which every writing transaction of `Database` holds
too, so the audit chain's order is the log's; every writing transaction projects what is
pending before it begins. A projection writes rows already chained: the background one holds
only the connection's lock, so appends go on while it runs. A background
projector (store/projector.py), started once the store is served, projects while the writer
is idle, so that a mutation rarely finds anything pending.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from engram_memory.contract.exceptions import (
    CommitOutcomeUnknown,
    StoreBehindAnchor,
    StoreCorrupt,
    StoreUnavailable,
)
from engram_memory.store import audit
from engram_memory.store.call_log import CallLog
from engram_memory.store.heads import ChainHeads, Head, HeadsAnchor
from engram_memory.store.projection import LoggedCall, Projection, read_position
from engram_memory.store.projector import BackgroundProjector
from engram_memory.store.published import Publication
from engram_memory.store.transaction import Transaction

log = logging.getLogger("engram_memory.store")

# Where a background projection may be probed (the fault suite's failpoints): before it takes
# the writer's lock; its rows are written and its COMMIT not yet run; its COMMIT ran and the
# log released nothing yet.
BEFORE_BEGIN = "before_begin"
BEFORE_COMMIT = "before_commit"
AFTER_COMMIT = "after_commit"
# Called with one of the points above and the tools whose audit entries the batch holds.
ProjectionProbe = Callable[[str, frozenset[str]], None]


class CallLogWriting:
    """Mixed into `Database`: the attributes below are the writer's own."""

    _lock: threading.RLock
    _chain_lock: threading.RLock
    _projection: Projection | None
    _published: Publication
    _anchor: HeadsAnchor | None
    _damaged: bool
    _projector: BackgroundProjector | None
    _projection_probe: ProjectionProbe | None

    def _direct_transaction(self) -> AbstractContextManager[Transaction]:
        """A transaction that does not project first (`Database` defines it)."""
        raise NotImplementedError

    def _load_heads(self) -> ChainHeads:
        raise NotImplementedError

    def attach_call_log(self, log_: CallLog, *, project: bool = True) -> None:
        """Commit audit-only calls through `log_` from now on, after queueing every record
        after the projected position. With `project` they are written into this file now;
        without, they stay pending (the start-up checks read them there: a start that is
        refused leaves the file as it found it) until the next writing transaction.

        Raises:
            StoreCorrupt: the log lacks records this file says were projected or are to come
                (removed, or replaced by an older copy), or a record fails its check.
            StoreBehindAnchor: the log's records do not follow the file's audit trail (the
                file lost acknowledged entries, its WAL for one).
            StoreUnavailable: the log or the file could not be read or written.
        """
        with self._lock, self._chain_lock:
            with self._direct_transaction() as tx:
                position = read_position(tx)
            head = log_.durable_head().sequence
            if head < position:
                raise StoreCorrupt(
                    f"call log ends at record {head} but {position} were projected: "
                    "it was removed or replaced by an older copy"
                )
            projection = Projection(log_, position)
            expected = position + 1
            audit_head = None
            for sequence, payload in log_.read_from(position + 1):
                if sequence != expected:
                    raise StoreCorrupt(f"call log: records missing before {sequence}")
                call = LoggedCall.decode(payload)
                projection.queue(sequence, call)
                audit_head = call.batch.head if call.batch.rows else audit_head
                expected += 1
            if expected != head + 1:
                raise StoreCorrupt(f"call log: records missing after {expected - 1}")
            heads = self._load_heads()
            _continues(projection.first_audit_row(), heads.audit)
            self._projection = projection
            self._published.reset(heads.advanced(audit_head, {}))
            if project:
                self._project_locked()

    def pending_audit_hash(self, sequence: int) -> str | None:
        """The hash of audit entry `sequence` if it is acknowledged in the call log and not
        yet in this file (the anchor comparison at start, store/anchors.py)."""
        projection = self._projection
        return None if projection is None else projection.audit_hash(sequence)

    @property
    def call_log(self) -> CallLog | None:
        return None if self._projection is None else self._projection.log

    @property
    def logs_calls(self) -> bool:
        """True when audit-only calls commit through the call log (`append_logged`)."""
        return self._projection is not None

    def append_logged(
        self,
        records: list[audit.AuditRecord],
        claims: list[tuple[str, int]],
        prune_before_ms: int | None = None,
    ) -> None:
        """Commit audit entries (their receipts and audit-id claims) and a pruning of expired
        claims through the call log: durable and anchored when this returns, projected into
        this file later. Entries spending a confirmation never come here (a transaction must
        check the confirmation is unused).

        Raises:
            StoreCorrupt: the store is stopped.
            StoreUnavailable: nothing was made durable; CommitOutcomeUnknown: durable, but the
                head anchor could not cover it.
        """
        projection = self._projection
        if projection is None:
            raise StoreUnavailable("no call log attached")
        # The chain order is the log's: no writing transaction runs meanwhile (a background
        # projection may: it only writes what is already chained).
        with self._chain_lock:
            if self._damaged:
                raise StoreCorrupt("store stopped: file damaged")
            _, heads = self._published.current()
            batch = audit.prepare(records, heads.audit)
            batch.claims.extend([audit_id, until] for audit_id, until in claims)
            projection.append(LoggedCall(batch, prune_before_ms))
            generation = self._published.publish(batch.head if batch.rows else None, {}, ())
        if generation and self._anchor is not None:
            self._anchor.cover(generation)
        if projection.full():  # the projector fell behind: memory stays bounded
            try:
                self.project()
            except StoreUnavailable:  # acknowledged already; the next transaction retries
                log.warning("store: projecting the call log failed; it is retried")
        elif self._projector is not None:
            self._projector.appended()

    def start_projector(self, probe: ProjectionProbe | None = None) -> None:
        """Project the call log in the background from now on (store/projector.py), calling
        `probe` at each point of a background projection. Once only; `close` stops it."""
        projection = self._projection
        if projection is None or self._projector is not None:
            return
        self._projection_probe = probe
        self._projector = BackgroundProjector(self._project_in_background, projection.half_full)
        self._projector.start()
        if projection.pending():
            self._projector.appended()

    def stop_projector(self) -> None:
        """Wait for a background projection under way; what is pending stays pending."""
        if self._projector is not None:
            self._projector.stop()

    def _project_in_background(self) -> None:
        projection, probe = self._projection, self._projection_probe
        if projection is None or not projection.pending():
            return
        if probe is not None:
            probe(BEFORE_BEGIN, projection.pending_tools())
        with self._lock:
            self._project_locked(probe)

    def project(self) -> None:
        """Write the call log's pending records into this file now.

        Raises:
            StoreCorrupt / StoreUnavailable / CommitOutcomeUnknown: as for every transaction
                (the records stay pending and are projected by a later one, or at start).
        """
        if self._projection is not None and self._projection.pending():
            with self._lock:
                self._project_locked()

    def _project_locked(self, probe: ProjectionProbe | None = None) -> None:
        projection = self._projection
        if projection is None or not projection.pending():
            return
        position: int | None = None
        tools = projection.pending_tools() if probe is not None else frozenset()
        try:
            with self._direct_transaction() as tx:
                position = projection.write_pending(tx)
                # Records other calls acknowledged: no commit of the call on this thread
                # (`Database.commits_on_this_thread` tells whether anything of a call is
                # durable).
                tx.wrote = False
                if probe is not None and position is not None:
                    probe(BEFORE_COMMIT, tools)
        except CommitOutcomeUnknown:
            projection.outcome_unknown()
            raise
        if position is not None:
            if probe is not None:
                probe(AFTER_COMMIT, tools)
            projection.committed(position)


def _continues(first: list[Any] | None, head: Head) -> None:
    """Raises: StoreBehindAnchor: the log's first pending entry does not follow `head`."""
    if first is not None and (first[0] != head[0] + 1 or first[15] != head[1]):
        raise StoreBehindAnchor(
            f"store's audit trail ends at entry {head[0]} but its call log continues from "
            f"entry {first[0] - 1}: the store file lost acknowledged writes; restore it from "
            "a backup"
        )
