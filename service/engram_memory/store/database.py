"""The DuckDB file: one writer process, numbered migrations, serialized transactions.

DuckDB allows one writing process per file, so the service holds the only connection and
serializes every writing transaction behind a lock; read-only snapshots run on cursors of that
connection (`reading()`, store/readers.py) and never wait for the writer. Every DuckDB
exception is mapped here, at the one boundary (store/driver_errors.py classifies it): a
transient failure or a full disk rolls back as `StoreUnavailable`; a damaged file raises
`StoreCorrupt` and stops the store for good in this process (logged once, with the file
name), so nothing is ever committed onto it.

The writer also keeps the chain heads (store/heads.py) in memory and, after each COMMIT that
moved them, lets the head anchor (store/anchors.py) record them outside the file before the
transaction returns, so every acknowledged write is covered.

With a call log attached (`attach_call_log`), calls whose only write is their audit entry
commit by appending to the log instead (`append_logged`); DuckDB follows in batches
(store/projection.py). Every writing transaction, and every reader that must see the whole
audit trail, projects what is pending first, so the chain order in the file is the log's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import duckdb

from engram_memory._internal.private_files import make_private, make_private_directory
from engram_memory.contract.exceptions import (
    CommitOutcomeUnknown,
    StoreCorrupt,
    StoreOpenFailed,
    StoreUnavailable,
)
from engram_memory.store import kept_index
from engram_memory.store.compaction import compact_store
from engram_memory.store.connection import DATABASE_FILE, connect, load_queries
from engram_memory.store.deferred import DeferredWork, Work
from engram_memory.store.driver_errors import (
    DriverFailure,
    classify,
    describe_open_failure,
    diagnose_open,
)
from engram_memory.store.heads import EMPTY_HEAD, ChainHeads, HeadsAnchor
from engram_memory.store.index_changes import IndexCommits
from engram_memory.store.logged_calls import CallLogWriting, ProjectionProbe
from engram_memory.store.projection import Projection
from engram_memory.store.projector import BackgroundProjector
from engram_memory.store.published import Publication
from engram_memory.store.read_cache import RecordCache
from engram_memory.store.readers import ReaderPool
from engram_memory.store.schema import apply_migrations, check_version
from engram_memory.store.side_writes import side_transaction
from engram_memory.store.snapshot import copied_on_exit
from engram_memory.store.transaction import Transaction

log = logging.getLogger("engram_memory.store")
_HEADS = load_queries("engram_memory.store.sql", "heads.sql")


class Database(CallLogWriting):
    """The single DuckDB connection of this process."""

    def __init__(
        self, connection: duckdb.DuckDBPyConnection, path: Path, *, announce_damage: bool = True
    ) -> None:
        self._connection = connection
        # False while startup checks run: their refusal is the one line the operator sees.
        self.announce_damage = announce_damage
        self.path = path
        self._lock = threading.RLock()
        # The audit chain's order: held by every writing transaction (`transaction`, inside
        # `_lock`) and by every call-log append, never by a background projection, which
        # writes rows already chained and so holds only `_lock` (the connection): an append
        # never waits for a projection (store/logged_calls.py).
        self._chain_lock = threading.RLock()
        self._readers = ReaderPool(lambda: self._connection)
        # Per worker thread: how many writing transactions this thread committed. A call runs
        # on one thread, so comparing before/after tells whether anything of it is durable.
        self._commits = threading.local()
        # Committed chain heads, their generation (the anchor's) and recently written keys.
        self._published = Publication()
        self._anchor: HeadsAnchor | None = None
        self._damaged = False
        # Tidying statements for the next write transaction (store/deferred.py).
        self.deferred = DeferredWork()
        # Hands committed index changes to the search index (store/index_changes.py).
        self.index_commits = IndexCommits()
        # The sealed index the last clean stop kept, until the index load takes it.
        self.kept_index: bytes | None = None
        # The rows `get` and search pages read, kept exact by every COMMIT before it returns
        # (store/read_cache.py).
        self.read_cache = RecordCache()
        self._projection: Projection | None = None
        self._projector: BackgroundProjector | None = None
        self._projection_probe: ProjectionProbe | None = None
        self._memory_mib: int | None = None  # DuckDB's default limit until `bound_memory`

    @property
    def damaged(self) -> bool:
        """True once a damaged file was detected: every later transaction is refused."""
        return self._damaged

    def heads(self) -> tuple[int, ChainHeads]:
        """(generation, committed chain heads) as of the last COMMIT."""
        return self._published.current()

    def written_since(self, key: str, generation: int) -> bool:
        return self._published.written_since(key, generation)

    def attach_anchor(self, anchor: HeadsAnchor | None) -> None:
        """From now on, every COMMIT that moves a head waits until `anchor` covers it."""
        self._anchor = anchor

    @property
    def anchor(self) -> HeadsAnchor | None:
        return self._anchor

    def driver_failure(self, exc: duckdb.Error | OSError, what: str) -> StoreUnavailable:
        """The exception to raise for a driver failure; a damaged file stops the store.

        The first damage is logged once, with the file's name only (never driver text, which
        may quote stored values).
        """
        kind = classify(exc)
        if kind is DriverFailure.DAMAGED:
            if not self._damaged and self.announce_damage:
                log.error(
                    "store file %s is damaged (%s); the store is stopped: no further reads or "
                    "writes in this process; run `engram-memory audit verify`, restore from a "
                    "backup",
                    self.path,
                    what,
                )
            self._damaged = True
            return StoreCorrupt(f"{what}: store file damaged")
        if kind is DriverFailure.NO_SPACE:
            return StoreUnavailable(f"{what}: no space left")
        return StoreUnavailable(what)

    def _load_heads(self) -> ChainHeads:
        with self._direct_transaction() as tx:
            audit = tx.fetchone(_HEADS["audit_head"])
            journal = tx.fetchall(_HEADS["journal_heads"])
        return ChainHeads(
            EMPTY_HEAD if audit is None else (int(audit[0]), str(audit[1])),
            {str(scope): (int(cursor), str(event_hash)) for scope, cursor, event_hash in journal},
        )

    @classmethod
    def open(
        cls,
        data_dir: Path,
        *,
        read_only: bool = False,
        announce_damage: bool = True,
        read_kept_index: bool = False,
    ) -> Database:
        """Open (creating and migrating if needed) the store in `data_dir`. A writable open
        takes the search index kept by the last clean stop (store/kept_index.py): on
        `kept_index` with `read_kept_index`, removed either way.

        Raises:
            StoreVersionSkew: the file is newer than this code or its ledger was altered.
            StoreOpenFailed: the file cannot be opened; its `failure` tells held by another
                process (with the holder's PID), damaged, not a store, or a data directory
                that is not a directory.
            StoreCorrupt: the file opened but a check or migration read a damaged block.
        """
        path = data_dir / DATABASE_FILE
        try:
            if data_dir.exists() and not data_dir.is_dir():
                raise NotADirectoryError(str(data_dir))
            make_private_directory(data_dir)  # parents too, whatever the umask
            created = not path.exists()
            connection = connect(path, read_only=read_only)
        except (duckdb.Error, OSError) as exc:
            failure, holder = diagnose_open(exc)
            raise StoreOpenFailed(failure, describe_open_failure(path, failure, holder)) from exc
        if created:  # under the process umask; an existing file is the start-up check's
            with suppress(OSError):
                make_private(path)
        database = cls(connection, path, announce_damage=announce_damage)
        try:
            if not read_only:
                database._migrate()
            database._check_version()
            database._published.reset(database._load_heads())
            if not read_only:  # under the store's lock: no other writer has it open
                database.kept_index = kept_index.take(data_dir, read=read_kept_index)
        except BaseException:
            database.close(checkpoint=False)  # a refused store stays as it was found
            raise
        return database

    def close(self, *, checkpoint: bool = True) -> None:
        """Fold the WAL into the file, then close: the next start replays nothing.

        Without `checkpoint`, leave the file and its WAL as found (a store that is refused
        must stay as it was, for the operator to inspect); a damaged file is never written.
        A failed checkpoint is logged and the close goes on (the WAL stays and is replayed).
        """
        self.stop_projector()
        if checkpoint and not self._damaged:
            with suppress(StoreUnavailable):  # what stays queued, the next start redoes
                self.project()
                self.settle_deferred()
        with self._lock, self._chain_lock, self._readers.exclusive(), suppress(duckdb.Error):
            if not checkpoint or self._damaged:
                self._connection.execute("PRAGMA disable_checkpoint_on_shutdown")
            else:
                try:
                    self._connection.execute("CHECKPOINT")  # a no-op on a read-only store
                except duckdb.Error:
                    log.warning("store: checkpoint at close failed; the next start replays the WAL")
            self._connection.close()
            if self._projection is not None:
                self._projection.log.close()

    def settle_deferred(self) -> None:
        """Run the queued tidying now, in a transaction of its own (at close, in tests).

        Raises:
            StoreUnavailable: as for every transaction (the work stays queued).
        """
        if len(self.deferred):
            with self.transaction() as tx:
                tx.start_writing()

    def _migrate(self) -> None:
        with self._direct_transaction() as tx:
            apply_migrations(tx)

    def _check_version(self) -> None:
        with self._direct_transaction() as tx:
            check_version(tx)

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One serialized DuckDB transaction; commits on exit, rolls back on any exception.

        The queued tidying (`deferred`) runs before the transaction's first write, so it never
        undoes what the transaction itself writes.

        A commit that moved a chain head returns only once the head anchor covers it.

        Raises:
            StoreCorrupt: the file is damaged (now or earlier): nothing is attempted.
            StoreUnavailable: begin or commit failed and the transaction rolled back (a full
                disk included).
            CommitOutcomeUnknown: COMMIT failed for another reason, or the head anchor could
                not be advanced after it (the caller decides whether the outcome of a
                mutation is unknown).
        """
        if self._projector is not None:
            self._projector.active()
        with self._lock, self._chain_lock:
            # The log's pending records go first, in this same transaction (one COMMIT for
            # both): the chains stay in order, and a rollback keeps them pending.
            projection, position = self._projection, None
            try:
                with self._direct_transaction() as tx:
                    if projection is not None and projection.pending():
                        position = projection.write_pending(tx)
                        tx.wrote = False  # not a write of the caller's call (see below)
                    yield tx
            except CommitOutcomeUnknown:
                if projection is not None and position is not None:
                    projection.outcome_unknown()
                raise
            if projection is not None and position is not None:
                projection.committed(position)

    @contextmanager
    def _direct_transaction(self) -> Iterator[Transaction]:
        """`transaction` without projecting first (the projection's own, and the open)."""
        with self._lock:
            if self._damaged:
                raise StoreCorrupt("store stopped: file damaged")
            try:
                self._connection.execute("BEGIN TRANSACTION")
            except duckdb.Error as exc:
                raise self.driver_failure(exc, "begin failed") from exc
            generation, heads = self._published.current()
            ran: list[Work] = []
            tx = Transaction(
                self,
                self._connection,
                heads,
                generation,
                before_first_write=lambda tx: ran.extend(self.deferred.run_in(tx)),
            )
            try:
                yield tx
            except BaseException:
                self.deferred.restore(ran)
                # The original failure is what matters, not a failed rollback.
                with suppress(duckdb.Error):
                    self._connection.execute("ROLLBACK")
                raise
            changes = tx.index_changes()
            self.index_commits.begin(changes)
            try:
                self._connection.execute("COMMIT")
            except duckdb.Error as exc:
                self.deferred.restore(ran)
                failure = self.driver_failure(exc, "commit failed")
                if type(failure) is StoreUnavailable and classify(exc) is DriverFailure.NO_SPACE:
                    # DuckDB rolls the transaction back when its WAL cannot be written.
                    self.index_commits.end(changes, "rolled_back")
                    raise failure from exc
                if changes:
                    self.read_cache.clear()
                self.index_commits.end(changes, "unknown")
                if isinstance(failure, StoreCorrupt):
                    raise failure from exc
                raise CommitOutcomeUnknown("commit failed") from exc
            # Before the heads are published and the call answered: a changed record is
            # never served from memory after its change committed.
            self.read_cache.apply(changes)
            self.index_commits.end(changes, "committed")
            if tx.wrote:
                self._commits.count = self.commits_on_this_thread() + 1
            generation = self._published.publish(*tx.moved_heads(), tx.written_keys())
        # Outside the lock, so one anchor write can cover commits made meanwhile.
        if generation and self._anchor is not None:
            self._anchor.cover(generation)

    @contextmanager
    def reading(self, *, audit_complete: bool = True) -> Iterator[Transaction]:
        """One read-only snapshot on a cursor of its own; never waits for the writer lock.

        With `audit_complete` (the default) the call log's pending records are projected
        first, so the snapshot holds every acknowledged audit entry; the hot path's readers,
        which never read the audit tables, pass False and take no write transaction.

        DuckDB's MVCC gives the snapshot a consistent view of what was committed when it
        began, so a read sees every write of a committed call or none of it. The heads are
        taken before BEGIN, so they never claim more than the snapshot holds.

        Raises:
            StoreCorrupt: the file is damaged (now or earlier).
            StoreUnavailable: the snapshot could not begin or a query failed.
        """
        if audit_complete:
            self.project()
        elif self._projector is not None:
            self._projector.active()
        if self._damaged:
            raise StoreCorrupt("store stopped: file damaged")
        generation, heads = self.heads()
        try:
            cursor = self._readers.acquire()
        except duckdb.Error as exc:
            raise self.driver_failure(exc, "cannot open a read cursor") from exc
        try:
            try:
                cursor.execute("BEGIN TRANSACTION")
            except duckdb.Error as exc:
                raise self.driver_failure(exc, "begin failed") from exc
            try:
                yield Transaction(self, cursor, heads, generation, writable=False)
            finally:
                # Nothing was written: ending the snapshot cannot lose anything.
                with suppress(duckdb.Error):
                    cursor.execute("ROLLBACK")
        finally:
            self._readers.release(cursor)

    @contextmanager
    def side_write(self) -> Iterator[Transaction]:
        """A writing transaction NOT under the writer's lock, for rows no reader sees until a
        writer transaction makes them visible (store/side_writes.py says what it may do).

        Raises:
            StoreCorrupt / StoreUnavailable: see `side_writes.side_transaction`.
        """
        if self._damaged:
            raise StoreCorrupt("store stopped: file damaged")
        generation, heads = self.heads()
        with side_transaction(self, self._readers, heads, generation) as tx:
            yield tx

    def read_from_memory(self) -> None:
        """A read served from memory (store/read_cache.py) began: the store is not idle, as a
        read snapshot beginning would say, so the background projector leaves the call in
        flight alone (store/projector.py)."""
        if self._projector is not None:
            self._projector.active()

    def commits_on_this_thread(self) -> int:
        count: int = getattr(self._commits, "count", 0)
        return count

    @contextmanager
    def snapshot_copy(self, target: Path) -> Iterator[Transaction]:
        """A read transaction on its own cursor; when the block ends, the store as this
        transaction sees it is copied into a new DuckDB file `target` (store/snapshot.py).

        Writers go on meanwhile (MVCC): nothing they commit is seen or copied.

        Raises:
            StoreUnavailable: the snapshot or its copy failed (`target` is the caller's to
                shred).
        """
        self.project()  # the copy holds every acknowledged call
        if self._damaged:
            raise StoreCorrupt("store stopped: file damaged")
        generation, heads = self.heads()  # before the snapshot begins: never more than it holds
        with self._lock:  # the connection is shared; a cursor of it is not
            cursor = self._connection.cursor()
        try:
            with copied_on_exit(cursor, target):
                yield Transaction(self, cursor, heads, generation, writable=False)
        except duckdb.Error as exc:
            raise self.driver_failure(exc, "snapshot copy failed") from exc
        finally:
            cursor.close()

    def compact(self) -> tuple[int, int]:
        """Rewrite the store into a fresh file of live rows only, then shred the old file.

        DuckDB leaves deleted rows' bytes in freed blocks (forgotten records' keyed term
        hashes among them); only a copy leaves them behind. Every transaction waits for the
        rewrite (they serialize on the same lock). The swap is crash-safe: the store file is
        at every moment either the old or the complete new one; leftovers of an interrupted
        run are shredded by the next. Returns (bytes before, bytes after).

        Raises:
            StoreUnavailable: the copy or the swap failed (the old file still serves).
        """
        with self._lock, self._readers.exclusive():
            self._project_locked()
            if self._damaged:
                raise StoreCorrupt("store stopped: file damaged")
            return compact_store(
                self._connection, self.path, self.driver_failure, reconnect=self._reconnect
            )

    def bound_memory(self, mib: int) -> None:
        """Lower DuckDB's memory limit to `mib` MiB (core/store_cache.py); cached blocks
        beyond it are evicted now.

        Raises:
            StoreUnavailable: DuckDB refused the setting.
        """
        with self._lock:
            self._memory_mib = int(mib)  # a reconnect (compaction) sets it again
            try:
                self._connection.execute(f"SET memory_limit = '{self._memory_mib}MiB'")
            except duckdb.Error as exc:
                raise self.driver_failure(exc, "memory limit refused") from exc

    def _reconnect(self) -> None:
        """Open the (new) store file again after `compact_store` closed the connection."""
        try:
            self._connection = connect(self.path)
        except duckdb.Error as exc:
            raise self.driver_failure(exc, "cannot reopen the store file") from exc
        if self._memory_mib is not None:
            self.bound_memory(self._memory_mib)

    def checkpoint(self) -> None:
        """Fold the WAL into the main file (used before copies and shredding checks)."""
        with self._lock:
            self._project_locked()
            if self._damaged:
                raise StoreCorrupt("store stopped: file damaged")
            try:
                self._connection.execute("CHECKPOINT")
            except duckdb.Error as exc:
                raise self.driver_failure(exc, "checkpoint failed") from exc
