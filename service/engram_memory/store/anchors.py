"""Head anchors: what the store acknowledged, kept outside the DuckDB file, so loss is noticed.

DuckDB keeps recent commits in its WAL; a WAL truncated or deleted while the service was
stopped, or rows removed from the file, leave a store that opens cleanly but is behind what it
acknowledged, and would re-execute idempotency keys as new. The anchor file
`<data>/anchor.json` records the audit head (sequence, entry hash) and every scope's journal
head (cursor, event hash), MACed with a key derived from the root key ring. It advances
after every COMMIT that moved a head and before that transaction returns, so every answer a
caller received is covered; one write can cover several commits made meanwhile.

At startup and in `audit verify` the store is compared with its anchor: each anchored
position must exist with the anchored hash (a store ahead of its anchor is fine: a crash can
fall between COMMIT and the anchor write). A store behind its anchor is refused
(`StoreBehindAnchor`, exit 3) until it is restored from a backup or an operator accepts the
loss (`admin accept-loss`), which re-anchors at the store's heads and audits what was lost.

A missing anchor file is a loss once the store has been anchored (a marker row in the store
says so); before that (a new store, or one that predates anchors) it is created.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.errors import EngramError, StoreBehindAnchor
from engram_memory.durable_files import fsync_directory
from engram_memory.store.database import (
    CommitOutcomeUnknown,
    Database,
    StoreUnavailable,
    Transaction,
    load_queries,
)
from engram_memory.store.heads import ChainHeads

ANCHOR_FILE = "anchor.json"
_FORMAT = "engram-head-anchor-v1"
_Q = load_queries("engram_memory.store.sql", "anchors.sql")
log = logging.getLogger("engram_memory.store")


class AnchorInvalid(EngramError):
    """The anchor file is malformed or its MAC does not verify (tampered, or another root)."""


@dataclass(frozen=True)
class Loss:
    """How the store differs from its anchor. `anchored` is None when there is no usable
    anchor file (missing on an anchored store, or not authentic)."""

    anchored: ChainHeads | None
    actual: ChainHeads
    problems: tuple[str, ...]

    def summary(self) -> str:
        """The problems on one line (the first three, then a count)."""
        shown = "; ".join(self.problems[:3])
        more = len(self.problems) - 3
        return shown + (f"; and {more} more" if more > 0 else "")

    def audit_detail(self) -> str:
        """Anchored vs actual heads, for the accept-loss audit entry (ids and hashes only)."""
        anchored: JsonValue = None if self.anchored is None else self.anchored.as_json()
        return json.dumps(
            {"anchored": anchored, "actual": self.actual.as_json(), "problems": self.problems},
            sort_keys=True,
        )


class AnchorFile:
    """The MACed anchor file; `key` None reads without authenticating (auditors without
    the root key) and cannot write."""

    def __init__(self, path: Path, key: bytes | None) -> None:
        self.path = path
        self._key = key

    @property
    def authenticated(self) -> bool:
        return self._key is not None

    def _mac(self, body: dict[str, JsonValue]) -> str:
        assert self._key is not None
        return hmac.new(self._key, canonical_json(body), hashlib.sha256).hexdigest()

    def read(self) -> ChainHeads | None:
        """The anchored heads, or None when there is no anchor file.

        Raises:
            AnchorInvalid: unreadable, malformed, or (with a key) its MAC does not verify.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise AnchorInvalid("anchor file cannot be read") from exc
        try:
            document = json.loads(text)
            if not isinstance(document, dict) or set(document) != {"format", "heads", "mac"}:
                raise ValueError("shape")
            body: dict[str, JsonValue] = {"format": document["format"], "heads": document["heads"]}
            if body["format"] != _FORMAT:
                raise ValueError("format")
            heads = ChainHeads.from_json(document["heads"])
        except ValueError as exc:
            raise AnchorInvalid("anchor file is malformed") from exc
        if self._key is not None and not hmac.compare_digest(str(document["mac"]), self._mac(body)):
            raise AnchorInvalid("anchor file MAC does not verify")
        return heads

    def write(self, heads: ChainHeads) -> None:
        """Replace the file atomically and durably (temp file, fsync, rename, dir fsync).

        Raises:
            OSError: the file system refused (the previous anchor stays in place).
        """
        body: dict[str, JsonValue] = {"format": _FORMAT, "heads": heads.as_json()}
        data = canonical_json({**body, "mac": self._mac(body)})
        temporary = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.path)
        fsync_directory(self.path.parent)


def compare(tx: Transaction, anchored: ChainHeads, actual: ChainHeads) -> list[str]:
    """Where the store lacks what the anchor recorded: [] when every anchored position exists
    with the anchored hash."""
    problems = []
    sequence, entry_hash = anchored.audit
    if sequence:
        row = tx.fetchone(_Q["audit_hash_at"], [sequence])
        if row is None:
            problems.append(f"audit trail ends at entry {actual.audit[0]}, anchored {sequence}")
        elif row[0] != entry_hash:
            problems.append(f"audit entry {sequence} differs from the anchored one")
    for scope_ref, (cursor, event_hash) in sorted(anchored.journal.items()):
        if not cursor:
            continue
        row = tx.fetchone(_Q["event_hash_at"], [scope_ref, cursor])
        have = actual.journal_head(scope_ref)[0]
        if row is None and not have:
            problems.append(f"journal of {scope_ref} is gone, anchored cursor {cursor}")
        elif row is None:
            problems.append(f"journal of {scope_ref} ends at cursor {have}, anchored {cursor}")
        elif row[0] != event_hash:
            problems.append(f"journal event {cursor} of {scope_ref} differs from the anchored one")
    return problems


def find_loss(database: Database, file: AnchorFile) -> Loss | None:
    """Compare the store with its anchor file; None when nothing acknowledged is missing.

    Raises:
        StoreCorrupt / StoreUnavailable: the store could not be read.
    """
    _, actual = database.heads()
    try:
        anchored = file.read()
    except AnchorInvalid as exc:
        return Loss(None, actual, (f"anchor file {file.path} is not usable: {exc}",))
    with database.transaction() as tx:
        if anchored is None:
            marked = tx.fetchone(_Q["marker"])
            if marked is None or not marked[0]:
                return None
            return Loss(None, actual, (f"anchor file {file.path} is missing",))
        problems = compare(tx, anchored, actual)
    return Loss(anchored, actual, tuple(problems)) if problems else None


class HeadAnchor:
    """Keeps the anchor file in step with the writer's committed heads (`Database.heads`)."""

    def __init__(self, database: Database, file: AnchorFile, loss: Loss | None) -> None:
        self._database = database
        self._file = file
        self._loss = loss
        self._write_lock = threading.Lock()
        self._covered = 0
        self._anchored = ChainHeads() if loss is not None else database.heads()[1]

    @property
    def loss(self) -> Loss | None:
        """The loss found at open and not yet accepted (the store is not served meanwhile)."""
        return self._loss

    def cover(self, generation: int) -> None:
        """Return once the anchor holds the heads of `generation` or later.

        Raises:
            CommitOutcomeUnknown: the anchor could not be written (the commit stands, but is
                not covered; a later commit's advance covers it).
        """
        if self._loss is not None:
            return  # only accept-loss runs on a store with a loss, and it re-anchors itself
        with self._write_lock:
            if self._covered >= generation:
                return  # another caller's write covered this commit
            latest, heads = self._database.heads()
            regressions = self._anchored.regressions_to(heads)
            if regressions:
                log.error("head anchor would move backwards: %s", "; ".join(regressions))
                raise CommitOutcomeUnknown("head anchor would move backwards")
            try:
                self._file.write(heads)
            except OSError as exc:
                raise CommitOutcomeUnknown("head anchor not advanced") from exc
            self._anchored, self._covered = heads, latest

    def establish(self) -> None:
        """Anchor the current heads and mark the store as anchored (at every clean start).

        Raises:
            StoreUnavailable: the anchor file or the marker could not be written.
        """
        with self._write_lock:
            latest, heads = self._database.heads()
            try:
                self._file.write(heads)
            except OSError as exc:
                raise StoreUnavailable("head anchor cannot be written") from exc
            self._anchored, self._covered, self._loss = heads, latest, None
        with self._database.transaction() as tx:
            marked = tx.fetchone(_Q["marker"])
            if marked is not None and marked[0]:
                return
            tx.execute(_Q["mark"], [time.time_ns() // 1_000_000])
        # The marker must not wait in the WAL: a lost WAL would lose it with the tail.
        self._database.checkpoint()

    def accept_loss(self) -> Loss | None:
        """Re-anchor at the store's current heads; return the loss that was pending.

        Raises:
            StoreUnavailable: the anchor file or the marker could not be written.
        """
        loss = self._loss
        self.establish()
        return loss


def open_anchor(
    database: Database, data_dir: Path, key: bytes, *, tolerate_loss: bool = False
) -> HeadAnchor:
    """Compare the store with its anchor and attach the anchor to the writer.

    With `tolerate_loss` (the admin process running `accept-loss`) a loss is kept on the
    returned anchor instead of raised, and nothing is re-anchored until it is accepted.

    Raises:
        StoreBehindAnchor: the store lacks acknowledged writes (one line, exit 3).
        StoreCorrupt / StoreUnavailable: the store or the anchor could not be read/written.
    """
    file = AnchorFile(data_dir / ANCHOR_FILE, key)
    loss = find_loss(database, file)
    if loss is not None and not tolerate_loss:
        raise StoreBehindAnchor(
            f"store in {data_dir} is behind what it acknowledged ({loss.summary()}); "
            "restore it from a backup, or accept the loss with "
            "`engram-memory admin ... accept-loss` (README: lost writes)"
        )
    anchor = HeadAnchor(database, file, loss)
    database.attach_anchor(anchor)
    if loss is None:
        anchor.establish()
    return anchor


def anchor_afresh(database: Database, data_dir: Path, key: bytes) -> None:
    """Anchor a store at its own heads without comparing (a store restored from a verified
    backup: its anchor starts over with it).

    Raises:
        StoreUnavailable: the anchor file or the marker could not be written.
    """
    HeadAnchor(database, AnchorFile(data_dir / ANCHOR_FILE, key), None).establish()
