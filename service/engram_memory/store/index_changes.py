"""What a write transaction changed that a search index must follow, as plain values.

The store is the source of truth; an in-process search index (core/indexing.py) is a
projection of `records`, `lexical_documents` and `lexical_postings` (and of the sealed bodies, for
the semantic projections' `RecordEmbedded`). Every store function that
changes one of those notes the change on its transaction (`Transaction.note_index_change`),
and `Database.transaction` hands the committed changes to the projection's listener while it
still holds the writer's lock, so the projection moves exactly with the commits. A rolled-back
transaction hands over nothing; a side write (store/side_writes.py) never does either, because
what it writes stays invisible until a writer transaction commits the record row.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True)
class PostingBatch:
    """A record's postings as the one insert statement binds them (`memory.posting_batch`):
    space-separated keyed term hashes, field names and term frequencies."""

    count: int
    terms: str
    fields: str
    counts: str

    def triples(self) -> list[tuple[str, str, int]]:
        """The (term_hash, field, tf) postings this batch packs."""
        if not self.count:
            return []
        return [
            (term, field, int(tf))
            for term, field, tf in zip(
                self.terms.split(" "), self.fields.split(" "), self.counts.split(" "), strict=True
            )
        ]


@dataclass(frozen=True)
class RecordRow:
    """A `records` row as the readers use it (store/memory.py reads and writes it)."""

    record_id: str
    state: str
    record_digest: str
    payload_digest: str
    guard_digest: str
    recorded_cursor: int
    accept_cursor: int
    valid_t: int
    valid_t_end: int | None
    expires_at_ms: int | None
    sealed_body: bytes | None


@dataclass(frozen=True)
class RecordWritten:
    """A record row was inserted, whole (its sealed body included): the read cache
    (store/read_cache.py) publishes it; the search index follows `RecordAdmitted`."""

    scope_ref: str
    row: RecordRow

    @property
    def record_id(self) -> str:
        return self.row.record_id


@dataclass(frozen=True)
class RecordAdmitted:
    """A record row was inserted (it is `accepted_current`)."""

    scope_ref: str
    record_id: str
    accept_cursor: int
    recorded_cursor: int
    valid_t: int
    valid_t_end: int | None
    expires_at_ms: int | None


@dataclass(frozen=True)
class RecordStateSet:
    """A record's state changed (maintenance transitions, tombstone)."""

    scope_ref: str
    record_id: str
    state: str


@dataclass(frozen=True)
class DocumentIndexed:
    """A record's index document and postings (all of them, also when they were staged)."""

    scope_ref: str
    record_id: str
    field_lengths: Mapping[str, int]
    postings: Sequence[PostingBatch]


@dataclass(frozen=True)
class DocumentPurged:
    """A record's index document and postings were deleted."""

    scope_ref: str
    record_id: str


@dataclass(frozen=True)
class RecordEmbedded:
    """A record's text and keyed citations for the semantic projections. The text is the
    one its vector is computed from (search/embedding.py `record_text`); the projection's
    follower embeds it in batches after the commit (core/semantic_index.py), so embedding
    never holds the writer. Only the in-memory projection receives it: nothing of it is ever
    written to the store."""

    scope_ref: str
    record_id: str
    text: str
    citation_keys: tuple[str, ...]


IndexChange = (
    RecordAdmitted
    | RecordStateSet
    | DocumentIndexed
    | DocumentPurged
    | RecordEmbedded
    | RecordWritten
)


class IndexListener(Protocol):
    """Follows committed index changes (called under the writer's lock, so in commit order)."""

    def apply(self, changes: Sequence[IndexChange]) -> None:
        """Apply the changes of one committed transaction; must not raise."""

    def invalidate(self) -> None:
        """A commit's outcome is unknown: stop trusting what was applied so far."""


CommitOutcome = Literal["committed", "rolled_back", "unknown"]


class IndexCommits:
    """The listener of index changes, and a sequence that is odd while a commit carrying
    index changes runs from just before its COMMIT until the listener applied them.

    A reader that takes `stable_sequence()` before its snapshot begins and finds `sequence()`
    unchanged after its first statement knows its snapshot holds exactly the commits the
    listener has applied: none began, none ended in between.
    """

    def __init__(self) -> None:
        self._listener: IndexListener | None = None
        self._sequence = 0
        self._changed = threading.Condition()

    def follow(self, listener: IndexListener | None) -> None:
        """From now on hand every committed transaction's index changes to `listener`."""
        self._listener = listener

    def followed_by(self, listener: IndexListener) -> bool:
        """True while `listener` is handed every commit's changes (no one detached it)."""
        return self._listener is listener

    def stable_sequence(self, timeout: float) -> int | None:
        """The sequence once no index-changing commit is in flight, or None after `timeout`."""
        with self._changed:
            if self._changed.wait_for(lambda: self._sequence % 2 == 0, timeout):
                return self._sequence
            return None

    def sequence(self) -> int:
        with self._changed:
            return self._sequence

    def begin(self, changes: Sequence[IndexChange]) -> None:
        """Just before the COMMIT of a transaction (under the writer's lock)."""
        if changes:
            with self._changed:
                self._sequence += 1

    def end(self, changes: Sequence[IndexChange], outcome: CommitOutcome) -> None:
        """After that COMMIT: apply what committed; after an unknown outcome, invalidate."""
        if not changes:
            return
        listener = self._listener
        try:
            if listener is not None and outcome == "committed":
                listener.apply(changes)
            elif listener is not None and outcome == "unknown":
                listener.invalidate()
        finally:
            with self._changed:
                self._sequence += 1
                self._changed.notify_all()
