"""The call log: the durable commit point of every call, ahead of its DuckDB projection.

Issue 20 moves the commit point out of DuckDB's statement path: everything one call writes is
serialized once as one record, appended here and made durable, and only then answered; DuckDB
follows in batches (the projector). This module is the log itself, behind a narrow port
(`CallLog`: append a batch -> position, read from a position, the durable head, release what
the projection made durable) so that a shared log on another engine can later replace the
local segments for several replicas (DESIGN "Scale-out").

Local segments (`SegmentLog`) are files `<dir>/<first sequence:020d>.seg`:

    segment header  magic (16) | first sequence (8) | chain before it (32) | crc32 (4) | pad (4)
    record frame    length (4) | sequence (8) | chain (32) | crc32 of those (4) | payload

`chain = HMAC-SHA256(key, previous chain | sequence | SHA-256(payload))`, keyed from the
root key ring like the head anchor: a record cannot be edited, dropped or reordered without
the key, and the chain of the last record is what an anchor records to notice a lost tail.

Durability and concurrency: appenders hand their payloads to a group; one of them (the
leader) writes every waiting payload with one `write` and one `fdatasync`, then wakes the
others (group commit), so concurrent calls share one flush and throughput is bound by CPU,
not by the disk. `append` returns only once its records are durable.

Damage: at open, a torn final record of the last segment (a frame whose declared end is past
the end of the file, whose bytes after a valid header were never all written, or trailing
zeros) was never acknowledged; it is cut with one log line. Anything else that fails its
check (a flipped byte, a missing or reordered segment, a chain that does not continue) is
`StoreCorrupt`: fail-stop, as for a damaged DuckDB file.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from engram_memory._internal.durable_files import fsync_directory, shred
from engram_memory.contract.exceptions import StoreCorrupt, StoreUnavailable

log = logging.getLogger("engram_memory.store")

DIRECTORY = "calllog"  # <data>/calllog/, beside the store file
_MAGIC = b"engram-calllog-1"
_SEGMENT_HEADER = struct.Struct(">16sQ32sI4x")  # magic, first sequence, chain before, crc32
_FRAME_HEADER = struct.Struct(">IQ32sI")  # length, sequence, chain, crc32 of the three
_SUFFIX = ".seg"
_RELEASED = ".released"  # a projected segment on its way out (`release_through`)
GENESIS_CHAIN = bytes(32)
MAX_RECORD_BYTES = 64 * 1024 * 1024  # one call's record; larger is a programming error
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class LogHead:
    """The last durable record: its sequence (0 for an empty log) and chain value."""

    sequence: int
    chain: bytes


class CallLog(Protocol):
    """The port the store writes through; local segments today, a shared log later."""

    def append(self, payloads: Sequence[bytes]) -> int:
        """Make `payloads` durable, in order, as consecutive records; return the last one's
        sequence. Raises: StoreUnavailable (nothing of the batch is acknowledged)."""

    def read_from(self, sequence: int) -> Iterator[tuple[int, bytes]]:
        """(sequence, payload) of every durable record from `sequence` on, in order."""

    def durable_head(self) -> LogHead:
        """The last durable record."""

    def release_through(self, sequence: int) -> None:
        """Records up to `sequence` are durable elsewhere (projected): their space may go."""

    def close(self) -> None:
        """Wait for a flush under way, then release the log."""


def chain_after(key: bytes, previous: bytes, sequence: int, payload: bytes) -> bytes:
    """The chain value of record `sequence` with `payload`, following `previous`."""
    message = previous + sequence.to_bytes(8, "big") + hashlib.sha256(payload).digest()
    return hmac.new(key, message, hashlib.sha256).digest()


def _frame(sequence: int, chain: bytes, payload: bytes) -> bytes:
    head = struct.pack(">IQ32s", len(payload), sequence, chain)
    return head + struct.pack(">I", zlib.crc32(head)) + payload


def _segment_header(first: int, chain_before: bytes) -> bytes:
    head = struct.pack(">16sQ32s", _MAGIC, first, chain_before)
    return _SEGMENT_HEADER.pack(_MAGIC, first, chain_before, zlib.crc32(head))


def _zero_tail(payload: bytes) -> bool:
    """True when the payload ends in zeros a crash leaves where a write never landed (a
    record of ours never ends so: a flipped byte in an acknowledged record is damage)."""
    return not any(payload[-16:])


@dataclass
class _Segment:
    path: Path
    first: int  # sequence of its first record
    chain_before: bytes
    last: int  # sequence of its last durable record (first - 1 while empty)


class SegmentLog:
    """Local segment files with group commit (see the module docstring)."""

    def __init__(
        self, directory: Path, key: bytes, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES
    ) -> None:
        """Open (creating if needed) the log in `directory`; a torn tail is cut here.

        Raises:
            StoreCorrupt: a record or segment fails its check, or segments are missing.
            StoreUnavailable: the directory or a segment cannot be read or created.
        """
        self._dir = directory
        self._key = key
        self._segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._flushed = threading.Condition(self._lock)
        self._pending: list[bytes] = []  # frames given a sequence, not yet written
        self._leader = False
        self._failed: StoreUnavailable | None = None
        self.flushes = 0  # fdatasyncs done: fewer than appends when calls share a flush
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._segments, chain = self._recover()
            tail = self._segments[-1]
            self._fd = os.open(tail.path, os.O_WRONLY | os.O_APPEND)
            self._size = tail.path.stat().st_size
        except OSError as exc:
            raise StoreUnavailable("call log cannot be opened") from exc
        self._durable = LogHead(tail.last, chain)
        self._assigned = self._durable  # the last record handed a sequence

    # -- recovery ------------------------------------------------------------------------

    def _recover(self) -> tuple[list[_Segment], bytes]:
        for leftover in self._dir.glob(f"*{_RELEASED}"):  # a release a crash interrupted
            shred(leftover)
        paths = sorted(p for p in self._dir.iterdir() if p.suffix == _SUFFIX)
        if not paths:
            return [self._new_segment(1, GENESIS_CHAIN)], GENESIS_CHAIN
        segments: list[_Segment] = []
        chain: bytes | None = None
        for index, path in enumerate(paths):
            segment, chain = self._scan(path, chain, last_segment=index == len(paths) - 1)
            if segments and segment.first != segments[-1].last + 1:
                raise StoreCorrupt(f"call log: records missing before {path.name}")
            segments.append(segment)
        assert chain is not None
        return segments, chain

    def _scan(self, path: Path, chain: bytes | None, last_segment: bool) -> tuple[_Segment, bytes]:
        """Verify one segment; return it and the chain after its last record."""
        data = path.read_bytes()
        if len(data) < _SEGMENT_HEADER.size:
            raise StoreCorrupt(f"call log: segment {path.name} has no header")
        magic, first, before, crc = _SEGMENT_HEADER.unpack_from(data)
        if magic != _MAGIC or zlib.crc32(data[: _SEGMENT_HEADER.size - 8]) != crc:
            raise StoreCorrupt(f"call log: segment {path.name} header fails its check")
        if path.name != f"{first:020d}{_SUFFIX}" or (chain is not None and before != chain):
            raise StoreCorrupt(f"call log: segment {path.name} does not continue the chain")
        last, chain, torn = self._frames(data, first - 1, before)
        if torn is not None:
            if not last_segment:
                raise StoreCorrupt(f"call log: segment {path.name} is damaged")
            log.warning(
                "call log: cut a torn final record at %s offset %d (%d bytes, never acknowledged)",
                path.name,
                torn,
                len(data) - torn,
            )
            with open(path, "r+b") as handle:
                handle.truncate(torn)
                os.fsync(handle.fileno())
        return _Segment(path, first, before, last), chain

    def _frames(self, data: bytes, sequence: int, chain: bytes) -> tuple[int, bytes, int | None]:
        """Check a segment's frames; return (last sequence, chain after it, offset of a torn
        final frame or None).

        Raises:
            StoreCorrupt: a frame fails its check anywhere but at the torn end.
        """
        offset = _SEGMENT_HEADER.size
        while offset < len(data):
            frame = self._frame_at(data, offset, sequence, chain)
            if frame is None:
                return sequence, chain, offset
            chain, _, offset = frame
            sequence += 1
        return sequence, chain, None

    def _frame_at(
        self, data: bytes, offset: int, sequence: int, chain: bytes
    ) -> tuple[bytes, bytes, int] | None:
        """(chain, payload, offset after) of the frame at `offset`, which must be record
        `sequence + 1` following `chain`; None when it is torn: the bytes end inside it, only
        zeros follow the last good frame, or its payload ends in zeros where a write never
        landed.

        Raises:
            StoreCorrupt: the frame fails its check otherwise.
        """
        end = len(data)
        if end - offset < _FRAME_HEADER.size:
            return None
        length, number, stored, crc = _FRAME_HEADER.unpack_from(data, offset)
        if zlib.crc32(data[offset : offset + _FRAME_HEADER.size - 4]) != crc:
            if not any(data[offset:]):  # zeros a crash left after the last write
                return None
            raise StoreCorrupt(f"call log: the record after {sequence} fails its check")
        body_end = offset + _FRAME_HEADER.size + length
        if body_end > end:
            return None
        payload = data[offset + _FRAME_HEADER.size : body_end]
        if number != sequence + 1 or chain_after(self._key, chain, number, payload) != stored:
            if body_end == end and number == sequence + 1 and _zero_tail(payload):
                return None  # the file grew; the payload never landed
            raise StoreCorrupt(f"call log: record {sequence + 1} fails its check")
        return stored, payload, body_end

    def _new_segment(self, first: int, chain_before: bytes) -> _Segment:
        path = self._dir / f"{first:020d}{_SUFFIX}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, _segment_header(first, chain_before))
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_directory(self._dir)
        return _Segment(path, first, chain_before, first - 1)

    # -- appending: group commit ----------------------------------------------------------

    def append(self, payloads: Sequence[bytes]) -> int:
        """See `CallLog.append`. Raises: StoreUnavailable."""
        with self._lock:
            if self._failed is not None:
                raise StoreUnavailable("call log stopped after a failed flush")
            if any(len(payload) > MAX_RECORD_BYTES for payload in payloads):
                raise StoreUnavailable("call log record too large")
            sequence, chain = self._assigned.sequence, self._assigned.chain
            for payload in payloads:
                sequence += 1
                chain = chain_after(self._key, chain, sequence, payload)
                self._pending.append(_frame(sequence, chain, payload))
            self._assigned = LogHead(sequence, chain)
            while self._durable.sequence < sequence:
                if self._failed is not None:
                    raise StoreUnavailable("call log flush failed")
                if self._leader:
                    self._flushed.wait()
                else:
                    self._lead()
            return sequence

    def _lead(self) -> None:
        """Flush every pending frame: called with the lock held, released while writing, so
        appenders arriving meanwhile queue for the next flush."""
        self._leader = True
        frames, self._pending = self._pending, []
        target = self._assigned
        self._lock.release()
        try:
            failure = self._write(b"".join(frames))
        finally:
            self._lock.acquire()
            self._leader = False
        if failure is None:
            self._durable = target
            self._segments[-1].last = target.sequence
            if self._size >= self._segment_bytes:
                failure = self._rotate(target)
        if failure is not None:
            # What was written may or may not be on disk: nothing may follow it, so the log
            # stops; the next start keeps it, or cuts it as a torn tail.
            self._failed = failure
        self._flushed.notify_all()

    def _write(self, data: bytes) -> StoreUnavailable | None:
        """One write and one fdatasync of `data` (by the leader, without the lock)."""
        try:
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
            os.fdatasync(self._fd)
        except OSError as exc:
            log.error("call log: flush failed (%s)", type(exc).__name__)
            return StoreUnavailable("call log flush failed")
        self._size += len(data)
        self.flushes += 1
        return None

    def _rotate(self, after: LogHead) -> StoreUnavailable | None:
        """Start a new segment after the durable record `after` (by the leader, lock held;
        records given sequences meanwhile are still pending and go to the new segment)."""
        try:
            segment = self._new_segment(after.sequence + 1, after.chain)
            fd = os.open(segment.path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            log.error("call log: cannot start a segment (%s)", type(exc).__name__)
            return StoreUnavailable("call log cannot start a segment")
        os.close(self._fd)
        self._fd, self._size = fd, _SEGMENT_HEADER.size
        self._segments.append(segment)
        return None

    # -- reading and releasing ------------------------------------------------------------

    def read_from(self, sequence: int) -> Iterator[tuple[int, bytes]]:
        """See `CallLog.read_from`; each record is checked again as it is read.

        Raises:
            StoreCorrupt: a record no longer passes its check.
            StoreUnavailable: a segment cannot be read.
        """
        with self._lock:
            durable = self._durable.sequence
            segments = [(s.path, s.first, s.chain_before) for s in self._segments]
        for path, first, before in segments:
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise StoreUnavailable("call log segment cannot be read") from exc
            offset, number, chain = _SEGMENT_HEADER.size, first - 1, before
            while offset < len(data) and number < durable:
                frame = self._frame_at(data, offset, number, chain)
                if frame is None:  # below the durable head nothing may be torn
                    raise StoreCorrupt(f"call log: record {number + 1} fails its check")
                chain, payload, offset = frame
                number += 1
                if number >= sequence:
                    yield number, payload

    def durable_head(self) -> LogHead:
        with self._lock:
            return self._durable

    def release_through(self, sequence: int) -> None:
        """Shred every segment whose records are all at or below `sequence`, never the one
        being written: a released record may hold sealed content whose key is destroyed."""
        with self._lock:
            done = [s for s in self._segments[:-1] if s.last <= sequence]
            self._segments = [s for s in self._segments if s not in done]
        for segment in done:
            # Renamed first, in one step: a crash while shredding leaves a file the next
            # start shreds again, never a segment it would take for damage.
            released = segment.path.with_suffix(_RELEASED)
            try:
                segment.path.rename(released)
                fsync_directory(self._dir)
            except OSError:
                log.error("call log: segment %s could not be released", segment.path.name)
                continue
            if not shred(released):
                log.error("call log: segment %s could not be removed", segment.path.name)

    def first_available(self) -> int:
        """The sequence of the oldest record still on disk (the head's + 1 when none is):
        the store compares it with its projected position to notice a removed segment."""
        with self._lock:
            return self._segments[0].first

    def segment_paths(self) -> list[Path]:
        with self._lock:
            return [s.path for s in self._segments]

    def close(self) -> None:
        """Idempotent: a store closed twice closes its log once."""
        with self._lock:
            while self._leader:
                self._flushed.wait()
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
