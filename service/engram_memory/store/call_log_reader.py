"""Reading the call log without its key: what `audit verify` can check without the root key.

An auditor without the root key cannot authenticate the log's chain (store/call_log.py), as it
cannot authenticate the head anchor; it can still read every record after the store file's
projected position, checking each frame's CRC and number, so that the calls the log
acknowledged and the file does not hold yet are compared with the anchor and their audit
entries re-derived (admin/verification.py). A torn final frame ends the read, as at start.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from engram_memory.contract.exceptions import StoreCorrupt, StoreUnavailable
from engram_memory.store.call_log import _FRAME_HEADER, _MAGIC, _SEGMENT_HEADER, _SUFFIX


def records_after(directory: Path, after: int) -> Iterator[tuple[int, bytes]]:
    """(sequence, payload) of every whole record numbered above `after`, unauthenticated.

    Raises:
        StoreCorrupt: a header or frame fails its CRC, or numbers do not continue.
        StoreUnavailable: a segment cannot be read.
    """
    expected: int | None = None
    for path in sorted(p for p in directory.iterdir() if p.suffix == _SUFFIX):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise StoreUnavailable("call log segment cannot be read") from exc
        if len(data) < _SEGMENT_HEADER.size:
            raise StoreCorrupt(f"call log: segment {path.name} has no header")
        magic, first, _, crc = _SEGMENT_HEADER.unpack_from(data)
        if magic != _MAGIC or zlib.crc32(data[: _SEGMENT_HEADER.size - 8]) != crc:
            raise StoreCorrupt(f"call log: segment {path.name} header fails its check")
        if expected is not None and first != expected:
            raise StoreCorrupt(f"call log: records missing before {path.name}")
        number, offset = first - 1, _SEGMENT_HEADER.size
        while len(data) - offset >= _FRAME_HEADER.size:
            length, stored_number, _, crc = _FRAME_HEADER.unpack_from(data, offset)
            if zlib.crc32(data[offset : offset + _FRAME_HEADER.size - 4]) != crc:
                if not any(data[offset:]):
                    break  # zeros a crash left after the last write
                raise StoreCorrupt(f"call log: the record after {number} fails its check")
            end = offset + _FRAME_HEADER.size + length
            if end > len(data):
                break  # torn: never acknowledged
            if stored_number != number + 1:
                raise StoreCorrupt(f"call log: record {number + 1} is out of order")
            number, offset = stored_number, end
            if number > after:
                yield number, data[end - length : end]
        expected = number + 1
