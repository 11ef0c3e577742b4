"""What the single writer publishes after each COMMIT: the chain heads, the commit's
generation, and which keys recent commits wrote.

A generation counts the commits that published something. A read snapshot notes the generation
before it begins, so everything published at or below that generation is in the snapshot. That
lets a write transaction skip re-reading a key it already looked up on a snapshot: it must
re-read only if a commit after the snapshot wrote that key (`written_since`). The writer is the
only one that writes, so the ledger of recent keys is complete for the life of the process; it
is bounded, and a snapshot older than the oldest key it still remembers always re-reads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from engram_memory.store.heads import ChainHeads, Head

# Keys remembered for `written_since`: ~100 bytes each; a snapshot would have to be older
# than this many writes of idempotency results to be sent to the store instead.
RECENT_KEYS = 65_536


class Publication:
    """The committed heads and generation, and a bounded ledger of recently written keys."""

    def __init__(self, heads: ChainHeads | None = None, recent_keys: int = RECENT_KEYS) -> None:
        self._lock = threading.Lock()
        self._heads = heads or ChainHeads()
        self._generation = 0
        self._recent: OrderedDict[str, int] = OrderedDict()
        self._capacity = recent_keys
        # Every key written at a generation above this one is still in `_recent`.
        self._forgotten_below = 0

    def current(self) -> tuple[int, ChainHeads]:
        """(generation, committed chain heads) as of the last publishing COMMIT."""
        with self._lock:
            return self._generation, self._heads

    def reset(self, heads: ChainHeads) -> None:
        """The heads read from the store at open (nothing is published yet)."""
        with self._lock:
            self._heads = heads

    def publish(self, audit: Head | None, journal: Mapping[str, Head], keys: Iterable[str]) -> int:
        """After a COMMIT: lay its new heads over the committed ones and remember the keys it
        wrote; returns its generation, or 0 when it published nothing."""
        written = list(keys)
        if audit is None and not journal and not written:
            return 0
        with self._lock:
            self._heads = self._heads.advanced(audit, journal)
            self._generation += 1
            for key in written:
                self._recent[key] = self._generation
                self._recent.move_to_end(key)
            while len(self._recent) > self._capacity:
                _, generation = self._recent.popitem(last=False)
                self._forgotten_below = max(self._forgotten_below, generation)
            return self._generation

    def written_since(self, key: str, generation: int) -> bool:
        """True unless `key` was certainly not written after a snapshot of `generation`."""
        with self._lock:
            if generation < self._forgotten_below:
                return True
            return self._recent.get(key, 0) > generation
