"""The full read of the store (store/integrity.py), run once after serving starts.

DuckDB checks a block's checksum on every read, so no call is ever answered from a damaged
block: the call that reads it fails closed (STORE_UNAVAILABLE, and the store stops for good
in this process, store/database.py). The full read exists for the blocks no call reads: it
finds their damage. It used to run before serving and cost a 100k-record store most of its
start; it now runs in a thread of its own once the store serves, and a damaged block found
there stops the process as a refusal at start would have: the one damage line, then exit 4
(`StoreDamaged.exit_code`). Nothing can be written meanwhile onto the damaged file: the
failed read marks the store damaged first, which refuses every later transaction.

`audit verify` still reads every row before its verdict (admin/verification.py).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable

from engram_memory.contract.exceptions import StoreCorrupt, StoreDamaged, StoreUnavailable
from engram_memory.store.database import Database
from engram_memory.store.integrity import read_every_row

log = logging.getLogger("engram_memory.opening")

# How long `stop` waits for a scan in flight (one DuckDB statement: it cannot be cut short).
_STOP_WAIT_S = 5.0


def stop_process_on_damage(line: str) -> None:
    """The fail-stop: the refusal's one line on stderr, then exit 4 at once (no drain: the
    store refuses every transaction already, and an orderly close would checkpoint it)."""
    print(f"engram-memory: {line}", file=sys.stderr, flush=True)
    os._exit(StoreDamaged.exit_code)


class IntegrityScan:
    """Reads every row of `database` in a daemon thread; calls `on_damage` on a bad block."""

    def __init__(
        self, database: Database, on_damage: Callable[[str], None] = stop_process_on_damage
    ) -> None:
        self._database = database
        self._on_damage = on_damage
        self._thread: threading.Thread | None = None
        self.rows: int | None = None  # set once the read completed without damage

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engram-integrity", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the scan ended (tests, benchmarks); `stop` waits a bounded time."""
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self) -> None:
        self.join(_STOP_WAIT_S)

    def _run(self) -> None:
        started = time.monotonic()
        where = self._database.path
        try:
            with self._database.reading(audit_complete=False) as tx:
                tables, rows = read_every_row(tx)
        except StoreCorrupt:
            self._on_damage(f"store file {where} is damaged (a block failed its checksum)")
            return
        except StoreUnavailable:
            # Not damage: the store may be closing. Calls keep their own checks.
            log.warning("store integrity read did not complete; run `engram-memory audit verify`")
            return
        self.rows = rows
        log.info(
            "store integrity read: %d row(s) of %d table(s) in %.1f s",
            rows,
            tables,
            time.monotonic() - started,
        )
