"""One scope's lexical index in memory: per-record eligibility columns, field lengths, keyed
term postings, and the aggregates BM25F needs over the records that are `accepted_current`.

It is a projection of the store (`records`, `lexical_documents`, `lexical_postings`), kept in
step by the committed changes of store/index_changes.py and rebuilt from the store at start.
Records live in slots, appended in commit order, so `accept_cursor` ascends with the slot;
a posting packs (slot, field, tf) into one int64, and a record's postings of one term are
appended together, so they stay adjacent in the term's array. Posting arrays are `array('q')`
(appending a few postings to one costs far less than to a numpy array) copied into numpy per
query (a memcpy; a view would pin the array's buffer and refuse the next append).

`member` = `accepted_current` and indexed: the set A whose document count and per-field length
sums are maintained here. The eligible set E of a query (SPEC §8: pinned valid time, journal
cursor and now) is A minus the exceptions X: records whose valid time ends, that expire, that
begin after the query's valid time, or that were accepted after its cursor.
`ScopeIndex.statistics` subtracts X from A when X can only come from a short list (records with an
end or an expiry, and the accepts after the cursor) and evaluates every record otherwise; both
are exact.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engram_memory.contract.exceptions import IndexInconsistent
from engram_memory.search.columns import (
    FIELD_INDEX,
    FIELD_SHIFT,
    ID_BYTES,
    OPEN,
    SLOT_SHIFT,
    TF_MASK,
    Bools,
    Growing,
    Int64s,
)
from engram_memory.search.fields import FIELD_NAMES

# Evaluate every record instead of correcting A when more than this share are exceptions.
EXCEPTION_SHARE = 0.25


@dataclass(frozen=True)
class EligibleStatistics:
    """`n` and the per-field token totals over E (SPEC §10.1)."""

    document_count: int
    field_token_totals: dict[str, int]


@dataclass(frozen=True)
class SlotColumns:
    """One scope's per-slot columns, as held (purged slots included: `indexed` false)."""

    ids: npt.NDArray[np.bytes_]
    indexed: Bools
    current: Bools
    accept: Int64s
    recorded: Int64s
    valid_t: Int64s
    valid_end: Int64s
    expires: Int64s
    lengths: Int64s


class ScopeIndex:
    """The index of one scope; every method runs under the owner's lock."""

    def __init__(self) -> None:
        self.record_ids: list[str] = []
        self._slot_of: dict[str, int] = {}
        self._ids = Growing(f"S{ID_BYTES}")
        self._accept = Growing(np.int64)
        self._recorded = Growing(np.int64)
        self._valid_t = Growing(np.int64)
        self._valid_end = Growing(np.int64)
        self._expires = Growing(np.int64)
        self._current = Growing(np.bool_)  # state is accepted_current
        self._indexed = Growing(np.bool_)  # document and postings present
        self._lengths = np.zeros((16, len(FIELD_NAMES)), dtype=np.int64)
        self.postings: dict[str, array[int]] = {}
        self._posting_counts: list[int] = []
        self.dead_postings = 0
        # Aggregates over A (members: current and indexed).
        self.member_count = 0
        self._member_lengths = np.zeros(len(FIELD_NAMES), dtype=np.int64)
        # What lets a query correct A instead of evaluating every record.
        self._bounded: set[int] = set()  # slots with a t_end or an expiry
        self._bounded_array: Int64s | None = None
        self._open_valid_t_max = np.iinfo(np.int64).min  # over unbounded slots ever added
        self._accept_ascending = True
        self._recorded_after_accept = False

    # -- changes ----------------------------------------------------------------------------

    def _slot(self, record_id: str) -> int:
        slot = self._slot_of.get(record_id)
        if slot is not None:
            return slot
        if len(record_id.encode("ascii", "replace")) > ID_BYTES or not record_id.isascii():
            raise IndexInconsistent("record id outside the index's id form")
        slot = len(self.record_ids)
        self.record_ids.append(record_id)
        self._slot_of[record_id] = slot
        self._ids.extend([record_id.encode("ascii")])
        for column in (self._accept, self._recorded, self._valid_t, self._valid_end):
            column.extend([OPEN])
        self._expires.extend([OPEN])
        self._current.extend([False])
        self._indexed.extend([False])
        if slot >= len(self._lengths):
            grown = np.zeros((2 * len(self._lengths), len(FIELD_NAMES)), dtype=np.int64)
            grown[:slot] = self._lengths[:slot]
            self._lengths = grown
        self._posting_counts.append(0)
        return slot

    def slot_of(self, record_id: str) -> int:
        """The record's slot, assigned now if it has none (the semantic projections share
        the slots, search/semantic_scope.py).

        Raises:
            IndexInconsistent: the id is outside the index's id form.
        """
        return self._slot(record_id)

    def known_slot(self, record_id: str) -> int | None:
        return self._slot_of.get(record_id)

    def _is_member(self, slot: int) -> bool:
        return bool(self._current.data[slot] and self._indexed.data[slot])

    def _set_membership(self, slot: int, before: bool) -> None:
        after = self._is_member(slot)
        if after == before:
            return
        sign = 1 if after else -1
        self.member_count += sign
        self._member_lengths += sign * self._lengths[slot]

    def admit(
        self,
        record_id: str,
        *,
        accept_cursor: int,
        recorded_cursor: int,
        valid_t: int,
        valid_t_end: int | None,
        expires_at_ms: int | None,
    ) -> None:
        """A record row was inserted as `accepted_current`."""
        slot = self._slot(record_id)
        if self._accept.data[slot] != OPEN:
            raise IndexInconsistent("record admitted twice")
        before = self._is_member(slot)
        previous = self._accept.data[slot - 1] if slot else np.iinfo(np.int64).min
        if slot + 1 != len(self.record_ids) or accept_cursor < previous:
            self._accept_ascending = False
        self._recorded_after_accept |= recorded_cursor > accept_cursor
        self._accept.data[slot] = accept_cursor
        self._recorded.data[slot] = recorded_cursor
        self._valid_t.data[slot] = valid_t
        if valid_t_end is None and expires_at_ms is None:
            self._open_valid_t_max = max(self._open_valid_t_max, valid_t)
        else:
            self._bounded.add(slot)
            self._bounded_array = None
        self._valid_end.data[slot] = OPEN if valid_t_end is None else valid_t_end
        self._expires.data[slot] = OPEN if expires_at_ms is None else expires_at_ms
        self._current.data[slot] = True
        self._set_membership(slot, before)

    def set_state(self, record_id: str, state: str) -> None:
        slot = self._slot_of.get(record_id)
        if slot is None:
            return  # a record indexed before this index followed it cannot be unknown
        before = self._is_member(slot)
        self._current.data[slot] = state == "accepted_current"
        self._set_membership(slot, before)

    def add_document(
        self,
        record_id: str,
        field_lengths: Mapping[str, int],
        postings: Sequence[tuple[str, str, int]],
    ) -> None:
        """A record's document: its field lengths and (term, field, tf) postings."""
        slot = self._slot(record_id)
        if self._indexed.data[slot] or self._posting_counts[slot]:
            raise IndexInconsistent("record indexed twice")
        before = self._is_member(slot)
        for name, index in FIELD_INDEX.items():
            self._lengths[slot, index] = int(field_lengths.get(name, 0))
        by_term: dict[str, list[int]] = {}
        for term, field, tf in sorted(postings, key=lambda p: (p[0], FIELD_INDEX[p[1]])):
            if not 0 < tf <= TF_MASK:
                raise IndexInconsistent("term frequency outside the packed range")
            packed = (slot << SLOT_SHIFT) | (FIELD_INDEX[field] << FIELD_SHIFT) | tf
            by_term.setdefault(term, []).append(packed)
        for term, packed_postings in by_term.items():
            column = self.postings.get(term)
            if column is None:
                self.postings[term] = array("q", packed_postings)
            else:
                column.extend(packed_postings)
        self._posting_counts[slot] = len(postings)
        self._indexed.data[slot] = True
        self._set_membership(slot, before)

    def bulk_load(
        self,
        record_ids: Sequence[str],
        *,
        current: Bools,
        accept: Int64s,
        recorded: Int64s,
        valid_t: Int64s,
        valid_end: Int64s,
        expires: Int64s,
        lengths: Int64s,
        terms: Sequence[str],
        term_ranks: Int64s,
        packed: Int64s,
    ) -> None:
        """Fill an empty index at once: records in slot (accept cursor) order, every posting
        packed and sorted by term rank (ranks index `terms`), slot, field.

        Raises:
            IndexInconsistent: not empty, mismatched lengths, or ids outside the id form.
        """
        size = len(record_ids)
        if self.record_ids or any(
            len(column) != size
            for column in (current, accept, recorded, valid_t, valid_end, expires, lengths)
        ):
            raise IndexInconsistent("bulk load into a used index or of mismatched columns")
        if any(len(record_id) > ID_BYTES or not record_id.isascii() for record_id in record_ids):
            raise IndexInconsistent("record id outside the index's id form")
        self.record_ids = list(record_ids)
        self._slot_of = {record_id: slot for slot, record_id in enumerate(self.record_ids)}
        self._ids.extend(np.array(self.record_ids, dtype=f"S{ID_BYTES}"))
        for column, values in (
            (self._accept, accept),
            (self._recorded, recorded),
            (self._valid_t, valid_t),
            (self._valid_end, valid_end),
            (self._expires, expires),
            (self._current, current),
            (self._indexed, np.ones(size, dtype=np.bool_)),
        ):
            column.extend(values)
        self._lengths = np.zeros((max(16, size), len(FIELD_NAMES)), dtype=np.int64)
        self._lengths[:size] = lengths
        members = current
        self.member_count = int(members.sum())
        self._member_lengths = lengths[members].sum(axis=0).astype(np.int64)
        bounded = (valid_end != OPEN) | (expires != OPEN)
        self._bounded = set(np.flatnonzero(bounded).tolist())
        self._bounded_array = None
        if (~bounded).any():
            self._open_valid_t_max = int(valid_t[~bounded].max())
        self._accept_ascending = bool(np.all(accept[1:] >= accept[:-1]))
        self._recorded_after_accept = bool(np.any(recorded > accept))
        starts = np.flatnonzero(
            np.concatenate(([len(packed) > 0], term_ranks[1:] != term_ranks[:-1]))
        )
        ends = np.append(starts[1:], len(packed))
        # One bytes object sliced per term (a term's array is made from its bytes): a numpy
        # slice, scalar and `tobytes` per term cost ~0.4 s at 100k records.
        blob, width = np.ascontiguousarray(packed, dtype=np.int64).tobytes(), 8
        for rank, start, end in zip(
            term_ranks[starts].tolist(), starts.tolist(), ends.tolist(), strict=True
        ):
            self.postings[terms[rank]] = array("q", blob[start * width : end * width])
        self._posting_counts = np.bincount(packed >> SLOT_SHIFT, minlength=size).tolist()

    def purge_document(self, record_id: str) -> None:
        """A record's document and postings were deleted; its postings become dead weight
        that `compact` drops."""
        slot = self._slot_of.get(record_id)
        if slot is None:
            return
        before = self._is_member(slot)
        self._indexed.data[slot] = False
        self._set_membership(slot, before)
        self.dead_postings += self._posting_counts[slot]
        self._posting_counts[slot] = 0

    def compact(self) -> None:
        """Drop the postings of purged documents (their slots stay, unindexed)."""
        indexed = self._indexed.view()
        for term in list(self.postings):
            packed = np.array(self.postings[term], dtype=np.int64)
            kept = packed[indexed[packed >> SLOT_SHIFT]]
            if len(kept) == 0:
                del self.postings[term]
            elif len(kept) != len(packed):
                self.postings[term] = array("q", kept.tobytes())
        self.dead_postings = 0

    def rows(self) -> list[tuple[object, ...]]:
        """Every live record's columns and postings, sorted: two indexes of the same store
        state give equal rows (a diagnostic; tests compare a followed index with a rebuilt one).
        """
        postings: dict[int, list[tuple[str, int, int]]] = {}
        for term, column in self.postings.items():
            for packed in column:
                slot = packed >> SLOT_SHIFT
                if self._indexed.data[slot]:
                    field = (packed >> FIELD_SHIFT) & 0xFF
                    postings.setdefault(slot, []).append((term, field, packed & TF_MASK))
        return sorted(
            (
                self.record_ids[slot],
                bool(self._current.data[slot]),
                int(self._accept.data[slot]),
                int(self._recorded.data[slot]),
                int(self._valid_t.data[slot]),
                int(self._valid_end.data[slot]),
                int(self._expires.data[slot]),
                tuple(int(n) for n in self._lengths[slot]),
                tuple(sorted(postings.get(slot, []))),
            )
            for slot in range(len(self.record_ids))
            if self._indexed.data[slot]
        )

    def slot_columns(self) -> SlotColumns:
        """Views of every slot's columns (the index keeping at close reads them under the
        owner's lock: core/index_keeping.py)."""
        size = len(self.record_ids)
        return SlotColumns(
            self._ids.view(),
            self._indexed.view(),
            self._current.view(),
            self._accept.view(),
            self._recorded.view(),
            self._valid_t.view(),
            self._valid_end.view(),
            self._expires.view(),
            self._lengths[:size],
        )

    # -- queries ----------------------------------------------------------------------------

    def eligible(self, slots: Int64s, system_as_of: int, valid_as_of: int, now_ms: int) -> Bools:
        """SPEC §8 visibility of each slot (everything the principal check does not decide)."""
        result: Bools = (
            self._current.data[slots]
            & self._indexed.data[slots]
            & (self._accept.data[slots] <= system_as_of)
            & (self._recorded.data[slots] <= system_as_of)
            & (self._valid_t.data[slots] <= valid_as_of)
            & (valid_as_of <= self._valid_end.data[slots])
            & (now_ms < self._expires.data[slots])
        )
        return result

    def eligible_mask(
        self, system_as_of: int, valid_as_of: int, now_ms: int, exceptions: Int64s | None
    ) -> Bools:
        """`eligible` of every slot, computed once per query: the members, minus the accepts
        after the cursor and the bounded slots that fail, when `exceptions` (from
        `exception_slots` at the same pair) lists them (a copy and a few writes); else the
        predicate over every slot."""
        size = len(self.record_ids)
        if exceptions is None:
            return self.eligible(np.arange(size, dtype=np.int64), system_as_of, valid_as_of, now_ms)
        mask: Bools = self._current.view() & self._indexed.view()
        mask[exceptions] = self.eligible(exceptions, system_as_of, valid_as_of, now_ms)
        return mask

    def statistics(
        self,
        system_as_of: int,
        valid_as_of: int,
        now_ms: int,
        exceptions: Int64s | None,
        *,
        exception_share: float = EXCEPTION_SHARE,
    ) -> EligibleStatistics:
        """`n` and per-field token totals over E: the maintained aggregates over A minus the
        `exceptions` (from `exception_slots` at the same pair) when they are listed and few,
        else every record evaluated."""
        size = len(self.record_ids)
        if exceptions is not None and len(exceptions) <= exception_share * size:
            listed = exceptions
            members = self._current.data[listed] & self._indexed.data[listed]
            excluded = listed[members & ~self.eligible(listed, system_as_of, valid_as_of, now_ms)]
            count = self.member_count - len(excluded)
            totals = self._member_lengths - self._lengths[excluded].sum(axis=0)
        else:
            every = np.arange(size, dtype=np.int64)
            mask = self.eligible(every, system_as_of, valid_as_of, now_ms)
            count = int(mask.sum())
            totals = self._lengths[:size][mask].sum(axis=0)
        return EligibleStatistics(
            count, {name: int(totals[index]) for name, index in FIELD_INDEX.items()}
        )

    def exception_slots(self, system_as_of: int, valid_as_of: int) -> Int64s | None:
        """Every member that may be outside E, or None when that cannot be listed cheaply:
        members without an end or expiry are in E iff accepted (and recorded) at or before
        the cursor and begun by the valid time, which the ascending accept cursors and the
        largest start of such members decide."""
        if (
            not self._accept_ascending
            or self._recorded_after_accept
            or valid_as_of < self._open_valid_t_max
        ):
            return None
        size = len(self.record_ids)
        first_late = int(np.searchsorted(self._accept.view(), system_as_of, side="right"))
        if self._bounded_array is None:
            self._bounded_array = np.fromiter(sorted(self._bounded), dtype=np.int64)
        late = np.arange(first_late, size, dtype=np.int64)
        return np.union1d(self._bounded_array, late) if len(late) else self._bounded_array

    def postings_of(self, term: str) -> Int64s | None:
        """A copy of the term's packed postings (never a view: see the module docstring)."""
        column = self.postings.get(term)
        return None if column is None else np.array(column, dtype=np.int64)

    def posting_total(self) -> int:
        return sum(len(column) for column in self.postings.values())

    def field_lengths(self, slots: Int64s, fields: Int64s) -> Int64s:
        result: Int64s = self._lengths.ravel()[slots * len(FIELD_NAMES) + fields]
        return result

    def valid_ends(self, slots: Int64s) -> Int64s:
        result: Int64s = self._valid_end.data[slots]
        return result

    def valid_end_list(self, slots: Int64s) -> list[int | None]:
        """Each slot's valid-time end, None when open."""
        return [None if end == OPEN else int(end) for end in self._valid_end.data[slots].tolist()]

    def id_keys(self, slots: Int64s) -> npt.NDArray[np.bytes_]:
        result: npt.NDArray[np.bytes_] = self._ids.data[slots]
        return result
