"""Start-up's look at every key file: damaged ones are reported, one log line each, without
holding up the start.

A key file with a flipped byte used to be found only by `audit verify` or by the call that
needed it (answered `BLOB_MISSING`, issue 23 finding 7). At every start the server now
authenticates each key file under the root key ring (AES-GCM over the wrapped key, its
header and its own name: crypto/keyfile.py), in a background thread, after the key directory
was settled and while calls are already served: a store with 100,000 key files takes seconds
to scan (bench/key_scan.py), which a start must not wait for. Each damaged file is one error
line naming it (`keys/<shard>/<digest>.key`: a digest of scope and item, no secret), at most
`MAX_NAMED` of them, then one line counting the rest and the total.

Racing calls: a file that fails is looked at again under its shard's exclusive lock, which
waits for any store or destroy in flight (both hold the lock shared), so a key being
shredded (zeroed, then unlinked) or replaced is not reported as damaged. Headerless version 1
files name no owner in their bytes: only their shape is checked here (`audit verify` opens
them with their owner; rotation upgrades them).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engram_memory.contract.exceptions import KeyStoreUnavailable
from engram_memory.crypto.key_audit import key_file_sound, shown_name
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEY_SUFFIX, KeyStore

log = logging.getLogger("engram_memory.keys")

MAX_NAMED = 1_000  # damaged files named one line each; beyond, counted in the last line
# How long `stop` waits for the scan thread to notice (it checks between files).
_STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class KeyScanReport:
    files: int
    damaged: int
    seconds: float
    complete: bool  # False: stopped before the last file


class KeyFileScan:
    """Authenticates every key file of `keys` under `root`, in a thread of its own."""

    def __init__(self, keys: KeyStore, root: RootKey) -> None:
        self._keys, self._root = keys, root
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.report: KeyScanReport | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engram-key-scan", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the scan to end and wait a little for it (a daemon thread: never blocks exit)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=_STOP_WAIT_S)

    def join(self) -> None:
        """Wait until the scan has ended (benchmarks, tests)."""
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        try:
            self.run()
        except KeyStoreUnavailable:
            log.error("key file scan: the key directory cannot be listed")
        except Exception as exc:  # noqa: BLE001 - a scan failure must not end the server
            log.error("key file scan: unexpected %s", type(exc).__name__)

    def run(self) -> KeyScanReport:
        """Scan now, in the calling thread; logs each damaged file and a closing line.

        Raises:
            KeyStoreUnavailable: the key directory cannot be listed.
        """
        started = time.monotonic()
        files = damaged = 0
        complete = True
        for shard in self._keys.shards():
            if self._stopping.is_set():
                complete = False
                break
            for path in _key_files(shard):
                if self._stopping.is_set():
                    complete = False
                    break
                files += 1
                if self._damaged(shard, path):
                    damaged += 1
                    if damaged <= MAX_NAMED:
                        shown = shown_name(self._keys.directory, path)
                        log.error(
                            "key file damaged: %s does not authenticate under the root key; "
                            "the item it keys cannot be read (run `engram-memory audit verify`)",
                            shown,
                        )
        report = KeyScanReport(files, damaged, time.monotonic() - started, complete)
        self.report = report
        if damaged:
            unnamed = max(0, damaged - MAX_NAMED)
            log.error(
                "key file scan: %d of %d key files damaged (%d not named above)%s",
                damaged,
                files,
                unnamed,
                "" if complete else "; stopped before the end",
            )
        else:
            log.info("key file scan: %d key files authenticated", files)
        return report

    def _damaged(self, shard: Path, path: Path) -> bool:
        if key_file_sound(path, self._root, None):
            return False
        # Looked at again once no store or destroy of this shard is in flight.
        with self._keys.shard_lock(shard, exclusive=True):
            if not path.exists():
                return False
            return not key_file_sound(path, self._root, None)


def _key_files(shard: Path) -> list[Path]:
    """Raises: KeyStoreUnavailable: the shard cannot be listed."""
    try:
        return sorted(p for p in shard.iterdir() if p.name.endswith(KEY_SUFFIX))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise KeyStoreUnavailable("key directory cannot be listed") from exc
