"""`audit verify` and `audit export` on a store no server holds: every chain, receipt and row.

Shared by the `audit` command and `admin restore` (which verifies a staged copy first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engram_memory.contract.exceptions import AuditChainBroken, StoreBehindAnchor
from engram_memory.core.checkpoints import export_signed, wall_clock_ms
from engram_memory.crypto.checkpoint_key import CheckpointSigningKey
from engram_memory.store import audit, journal
from engram_memory.store.anchors import AnchorFile, find_loss
from engram_memory.store.call_log import DIRECTORY as CALL_LOG_DIRECTORY
from engram_memory.store.call_log import SegmentLog
from engram_memory.store.call_log_reader import records_after
from engram_memory.store.database import Database
from engram_memory.store.integrity import read_every_row
from engram_memory.store.projection import LoggedCall, read_position


@dataclass(frozen=True)
class Verified:
    """What `audit verify` checked."""

    events: int
    entries: int
    receipts: int
    tables: int
    rows: int
    anchor: str  # "checked", "checked (MAC not checked: no root key)", or "not checked"


def verify_data_dir(data_dir: Path) -> tuple[int, int, int]:
    """Returns (journal events, audit entries, receipts) verified (no anchor comparison:
    restore verifies a staged copy that has no anchor yet).

    Raises:
        JournalCorrupt / AuditChainBroken: the first defect found.
        StoreCorrupt: a block failed its checksum.
    """
    verified = verify_store(data_dir, None)
    return verified.events, verified.entries, verified.receipts


def verify_store(
    data_dir: Path, anchor: AnchorFile | None, call_log_key: bytes | None = None
) -> Verified:
    """Verify every chain and receipt, read every row, and compare with `anchor` if given.

    With `call_log_key` (from the root key) the calls the call log acknowledged and the store
    file does not hold yet (a server that stopped without closing) are written into it
    first, so they are verified too; without it only the file is.

    Raises:
        JournalCorrupt / AuditChainBroken: the first defect found.
        StoreCorrupt: a block failed its checksum.
        StoreOpenFailed: the store file cannot be opened.
        StoreBehindAnchor: the store lacks what its anchor recorded.
    """
    if call_log_key is not None:
        project_call_log(data_dir, call_log_key)
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            tables, rows = read_every_row(tx)
            events = sum(journal.verify_scope(tx, scope) for scope in journal.scopes(tx))
            entries, receipts = audit.verify(tx)
            position = read_position(tx)
        # Without the key, what the log holds beyond the file is read, not projected.
        logged = {} if call_log_key is not None else _logged_entries(data_dir, position)
        _check_logged(logged, database.heads()[1].audit)
        entries += len(logged)
        loss = None if anchor is None else find_loss(database, anchor, logged.get)
    finally:
        database.close()
    if loss is not None:
        raise StoreBehindAnchor(f"store is behind its head anchor: {loss.summary()}")
    checked = "not checked"
    if anchor is not None:
        checked = "checked" if anchor.authenticated else "checked (MAC not checked: no root key)"
    return Verified(events, entries, receipts, tables, rows, checked)


def _logged_entries(data_dir: Path, position: int) -> dict[int, str]:
    """{sequence: entry hash} of the audit entries the call log holds beyond the file's
    `position`, each checked to re-derive (read without the key: store/call_log_reader.py).

    Raises:
        StoreCorrupt: a frame or record fails its check.
        AuditChainBroken: an entry does not re-derive.
    """
    where = data_dir / CALL_LOG_DIRECTORY
    if not where.is_dir():
        return {}
    logged: dict[int, str] = {}
    for _, payload in records_after(where, position):
        batch = LoggedCall.decode(payload).batch
        for row in batch.rows:
            try:
                approval = next((a for a in batch.approvals if a[0] == row[0]), ())
                derived = audit.prepared_row_hash(row, approval)
            except (ValueError, KeyError, TypeError) as exc:
                raise AuditChainBroken("a call log entry is malformed") from exc
            if derived != row[16]:
                raise AuditChainBroken(f"call log entry {row[0]} hash does not re-derive")
            logged[int(row[0])] = str(row[16])
    return logged


def _check_logged(logged: dict[int, str], head: tuple[int, str]) -> None:
    """Raises: AuditChainBroken: the logged entries do not continue the file's trail.

    (Their rows link by `previous_hash`; here the numbers must follow the file's head
    without a gap, which is what the anchor comparison then relies on.)
    """
    expected = head[0] + 1
    for sequence in sorted(logged):
        if sequence != expected:
            raise AuditChainBroken(
                f"call log entry {sequence} does not follow entry {expected - 1}"
            )
        expected += 1


def project_call_log(data_dir: Path, key: bytes) -> None:
    """Write into the store file what its call log holds beyond it (nothing when the log
    directory does not exist: a store no server with a call log has served).

    Raises:
        StoreCorrupt: the log is damaged or does not match the store.
        StoreOpenFailed / StoreUnavailable: the store or the log cannot be opened.
    """
    where = data_dir / CALL_LOG_DIRECTORY
    if not where.is_dir():
        return
    database = Database.open(data_dir)
    try:
        call_log = SegmentLog(where, key)
        try:
            database.attach_call_log(call_log)
        except BaseException:
            call_log.close()
            raise
    finally:
        database.close()


def export_data_dir(
    data_dir: Path,
    out_dir: Path,
    key: CheckpointSigningKey | None = None,
    progress: Callable[[str], None] = lambda _line: None,
) -> dict[str, object]:
    """Verify, then export with a signed, timestamped manifest (and a checkpoint.json) when
    `key` is given, an unsigned timestamped one otherwise; an export of a broken chain is
    refused. (The store is read-only here: the checkpoint is not kept in it.)

    Raises:
        JournalCorrupt / AuditChainBroken: verification failed; nothing is exported.
    """
    verify_data_dir(data_dir)
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            manifest, _ = export_signed(tx, out_dir, progress, key, wall_clock_ms())
            return manifest
    finally:
        database.close()
