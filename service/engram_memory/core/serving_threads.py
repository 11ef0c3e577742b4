"""The work a start leaves to threads so that calls are served sooner, in the order that gets
the first search answered soonest (and, at a stop, the semantic embedder ended before the
store closes under it):

1. the search index loads (core/index_loading.py), started as soon as the store passed its
   checks, beside the key directory's settling (which reads key files, not index tables);
2. once it is loaded: DuckDB's cache is bounded (what the load cached is evicted), and the
   key file scan (crypto/key_scan.py) and the store's integrity read
   (core/integrity_scan.py) start; beside the load they would slow it down for nothing.
"""

from __future__ import annotations

import logging
import threading

from engram_memory.contract.exceptions import StoreUnavailable
from engram_memory.core.index_loading import BackgroundIndexLoad
from engram_memory.core.integrity_scan import IntegrityScan
from engram_memory.core.search_index import SearchIndex
from engram_memory.crypto.key_scan import KeyFileScan
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore
from engram_memory.store.database import Database

log = logging.getLogger("engram_memory.opening")

# How long a stop waits for the embedder's batch in hand (512 records embed in well under a
# second; its vectors are then kept in the store).
_EMBEDDER_STOP_S = 10.0


class ServingThreads:
    """The index load, then the scans, of one served store; `stop` before it closes."""

    def __init__(
        self,
        database: Database,
        keys: KeyStore,
        root_key: RootKey,
        search_index: SearchIndex,
        cache_mib: int,
    ) -> None:
        self._database, self._cache_mib, self._search_index = database, cache_mib, search_index
        self._closing = threading.Event()
        # Damaged key files are reported while serving: a large store's scan takes seconds
        # a start must not wait for.
        self._key_scan = KeyFileScan(keys, root_key)
        # A damaged block no call reads is found here, and stops the process (exit 4).
        self._integrity_scan = IntegrityScan(database)
        self._index_load = BackgroundIndexLoad(
            database, search_index, self._after_index_load, root_key.kept_index_key()
        )

    def start(self) -> None:
        self._index_load.start()

    def stop(self) -> None:
        """Wait for the load and the scans to end (closing the store under their reads would
        fail them); scans not started yet never start."""
        self._closing.set()
        self._index_load.stop()
        self._search_index.stop_embedding(_EMBEDDER_STOP_S)
        self._integrity_scan.stop()
        self._key_scan.stop()

    def index_following(self) -> bool:
        """True while the index follows every commit (see BackgroundIndexLoad.following)."""
        return self._index_load.following()

    def _after_index_load(self) -> None:
        try:
            self._database.bound_memory(self._cache_mib)
        except StoreUnavailable:
            log.error("store cache not bounded: DuckDB refused its memory limit")
        if not self._closing.is_set():
            self._key_scan.start()
            self._integrity_scan.start()
