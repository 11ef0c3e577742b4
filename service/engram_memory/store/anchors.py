"""Head anchors: what the store acknowledged, kept outside the DuckDB file, so loss is noticed.

DuckDB keeps recent commits in its WAL; a WAL truncated or deleted while the service was
stopped, or rows removed from the file, leave a store that opens cleanly but is behind what it
acknowledged, and would re-execute idempotency keys as new. The anchor (two slot files,
`<data>/anchor.a.json` and `<data>/anchor.b.json`, see `AnchorFile`) records the audit head
(sequence, entry hash) and every scope's journal head (cursor, event hash), MACed with a key
derived from the root key ring. It advances
after every COMMIT that moved a head and before that transaction returns, so every answer a
caller received is covered; one write can cover several commits made meanwhile.

At startup and in `audit verify` the store is compared with its anchor: each anchored
position must exist with the anchored hash (a store ahead of its anchor is fine: a crash can
fall between COMMIT and the anchor write). A store behind its anchor is refused
(`StoreBehindAnchor`, exit 3) until it is restored from a backup or an operator accepts the
loss (`admin accept-loss`), which re-anchors at the store's heads and audits what was lost.

A missing anchor is a loss once the store has been anchored (a marker row in the store
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
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from engram_memory._internal.durable_files import fsync_directory
from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.exceptions import (
    AnchorInvalid,
    CommitOutcomeUnknown,
    StoreBehindAnchor,
    StoreUnavailable,
)
from engram_memory.store.connection import load_queries
from engram_memory.store.database import Database
from engram_memory.store.heads import ChainHeads
from engram_memory.store.transaction import Transaction

ANCHOR_STEM = "anchor"  # <data>/anchor.a.json and <data>/anchor.b.json
_PAGE = 4096
_FORMAT = "engram-head-anchor-v1"
_Q = load_queries("engram_memory.store.sql", "anchors.sql")
log = logging.getLogger("engram_memory.store")


@dataclass(frozen=True)
class Loss:
    """How the store differs from its anchor. `anchored` is None when there is no usable
    anchor (missing on an anchored store, or not authentic)."""

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
    """The anchor: two MACed slot files, `anchor.a.json` and `anchor.b.json`, written in turn.

    Each write overwrites the older slot in place and flushes it with one fdatasync: no
    rename and no directory flush per commit, and no new blocks once a slot exists, so a full
    disk cannot stop an advance. A write torn by a crash leaves that slot unreadable and the
    other one (the previous advance, which covers every call answered before) in force;
    reading takes the valid slot with the highest serial. `key` None reads without
    authenticating (auditors without the root key) and cannot write.
    """

    def __init__(self, data_dir: Path, key: bytes | None) -> None:
        self.slots = tuple(data_dir / f"{ANCHOR_STEM}.{name}.json" for name in ("a", "b"))
        self._key = key
        self._serial = 0
        self._next_slot: int | None = None  # unknown until the slots were read

    @property
    def authenticated(self) -> bool:
        return self._key is not None

    @property
    def where(self) -> str:
        return str(self.slots[0].with_name(f"{ANCHOR_STEM}.{{a,b}}.json"))

    def _mac(self, body: dict[str, JsonValue]) -> str:
        assert self._key is not None
        return hmac.new(self._key, canonical_json(body), hashlib.sha256).hexdigest()

    def _decode(self, raw: bytes) -> tuple[int, ChainHeads]:
        """Raises: ValueError: malformed, or (with a key) its MAC does not verify."""
        document = json.loads(raw.decode("utf-8"))
        if not isinstance(document, dict) or set(document) != {"format", "serial", "heads", "mac"}:
            raise ValueError("shape")
        body: dict[str, JsonValue] = {k: document[k] for k in ("format", "serial", "heads")}
        serial = body["serial"]
        if body["format"] != _FORMAT or not isinstance(serial, int) or isinstance(serial, bool):
            raise ValueError("format")
        if self._key is not None and not hmac.compare_digest(str(document["mac"]), self._mac(body)):
            raise ValueError("MAC")
        return serial, ChainHeads.from_json(body["heads"])

    def read(self) -> ChainHeads | None:
        """The anchored heads, or None when there is no slot file at all.

        Raises:
            AnchorInvalid: slot files exist but none is readable, well-formed and (with a
                key) authentic.
        """
        found: list[tuple[int, int, ChainHeads]] = []
        present = False
        for index, slot in enumerate(self.slots):
            try:
                raw = slot.read_bytes()
            except FileNotFoundError:
                continue
            except OSError:
                present = True
                continue
            present = True
            try:
                serial, heads = self._decode(raw)
            except (ValueError, UnicodeDecodeError):
                continue  # torn by a crash, or altered: the other slot decides
            found.append((serial, index, heads))
        self._next_slot = 0
        if not present:
            return None
        if not found:
            raise AnchorInvalid("no anchor slot is intact and authentic")
        serial, index, heads = max(found, key=lambda item: item[0])
        self._serial, self._next_slot = serial, 1 - index
        return heads

    def write(self, heads: ChainHeads) -> None:
        """Overwrite the older slot with `heads` and flush it.

        Raises:
            OSError: the file system refused (the newer slot stays in force).
        """
        if self._next_slot is None:
            with suppress(AnchorInvalid):
                self.read()
        assert self._next_slot is not None
        body: dict[str, JsonValue] = {
            "format": _FORMAT,
            "serial": self._serial + 1,
            "heads": heads.as_json(),
        }
        data = canonical_json({**body, "mac": self._mac(body)})
        # Padding to whole pages keeps a slot's size, hence its blocks, from one write to the
        # next (JSON allows the trailing whitespace).
        data += b" " * (-len(data) % _PAGE)
        slot = self.slots[self._next_slot]
        created = not slot.exists()
        fd = os.open(slot, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size != len(data):
                os.ftruncate(fd, len(data))
            view, offset = memoryview(data), 0
            while offset < len(data):
                offset += os.pwrite(fd, view[offset:], offset)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_directory(slot.parent)
        self._serial += 1
        self._next_slot = 1 - self._next_slot


def compare(
    tx: Transaction,
    anchored: ChainHeads,
    actual: ChainHeads,
    pending: Callable[[int], str | None] = lambda _sequence: None,
) -> list[str]:
    """Where the store lacks what the anchor recorded: [] when every anchored position exists
    with the anchored hash (`pending`: the hash of an audit entry the call log holds and the
    file does not yet)."""
    problems = []
    sequence, entry_hash = anchored.audit
    if sequence:
        row = tx.fetchone(_Q["audit_hash_at"], [sequence])
        if row is None and (logged := pending(sequence)) is not None:
            row = (logged,)
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


def find_loss(
    database: Database,
    file: AnchorFile,
    logged: Callable[[int], str | None] | None = None,
) -> Loss | None:
    """Compare the store with its anchor; None when nothing acknowledged is missing.

    `logged`: the hash of an audit entry the call log holds and the file not yet (the
    store's own pending records when not given).

    Raises:
        StoreCorrupt / StoreUnavailable: the store could not be read.
    """
    _, actual = database.heads()
    try:
        anchored = file.read()
    except AnchorInvalid as exc:
        return Loss(None, actual, (f"anchor {file.where} is not usable: {exc}",))
    # A read: a start that is refused leaves the file as it was (the call log's pending
    # records are compared where they are).
    with database.reading(audit_complete=False) as tx:
        if anchored is None:
            marked = tx.fetchone(_Q["marker"])
            if marked is None or not marked[0]:
                return None
            return Loss(None, actual, (f"anchor {file.where} is missing",))
        problems = compare(tx, anchored, actual, logged or database.pending_audit_hash)
    return Loss(anchored, actual, tuple(problems)) if problems else None


class HeadAnchor:
    """Keeps the anchor in step with the writer's committed heads (`Database.heads`)."""

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
            StoreUnavailable: the anchor or the marker could not be written.
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
            StoreUnavailable: the anchor or the marker could not be written.
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
    file = AnchorFile(data_dir, key)
    loss = find_loss(database, file)
    if loss is not None and not tolerate_loss:
        raise StoreBehindAnchor(
            f"store in {data_dir} is behind what it acknowledged ({loss.summary()}); "
            "restore it from a backup, or accept the loss with "
            "`engram-memory admin ... accept-loss` (docs/operators/backup.md: lost writes)"
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
        StoreUnavailable: the anchor or the marker could not be written.
    """
    HeadAnchor(database, AnchorFile(data_dir, key), None).establish()
