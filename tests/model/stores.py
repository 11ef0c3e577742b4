"""Stores for the model-based test: the harness's services, renewed every few sequences.

Sequences do not need a store of their own (the model checks cursors relative to the journal
heads read when a sequence starts), but a store shared by hundreds of them grows, and so does
the cost of every call (the journal head and audit chain queries scan what is there). A fresh
store every `rotate_every` sequences keeps that cost flat, for ~45 ms per renewal; a
RAM-backed directory, when there is one, spares thousands of fsynced commits.

All stores share one `StoreClock`, so that sequences can make time pass (expiry) without
ever turning it back: every instant the service stored stays in the past.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from engram_memory.core.index_loading import follow_store
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.database import Database
from tests.harness import SIGNER

SHM = Path("/dev/shm")


class StoreClock:
    """Wall-clock milliseconds plus an offset that only grows: what the services, the policy
    decider and the callers' tokens all read, so that a jump moves them together."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def advance(self, ms: int) -> None:
        assert ms >= 0, "time never goes back"
        self.offset_ms += ms


class Stores:
    """Hands out services, opening a fresh store every `rotate_every` requests."""

    def __init__(self, engine: EmbeddedWasmEngine, rotate_every: int) -> None:
        self._engine = engine
        self._rotate_every = rotate_every
        self._root = Path(
            tempfile.mkdtemp(prefix="engram-model-", dir=SHM if SHM.is_dir() else None)
        )
        self.clock = StoreClock()
        self._current: Services | None = None
        self._handed_out = 0
        self.opened = 0

    def next(self) -> Services:
        if self._current is None or self._handed_out >= self._rotate_every:
            self._close_current()
            self._current = self._open()
            self._handed_out = 0
        self._handed_out += 1
        return self._current

    def _open(self) -> Services:
        self.opened += 1
        data = self._root / f"store-{self.opened}"
        database = Database.open(data)
        return Services(
            database=database,
            keys=KeyStore(data / KEYS_DIRECTORY),
            decider=PolicyDecider(self._engine, self._engine.identity, self.clock),
            root_key=RootKey(os.urandom(32)),
            host_keys=HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()}),
            settings=ServiceSettings(host_memory_enabled=True),
            clock_ms=self.clock,
            search_index=follow_store(database),
        )

    def _close_current(self) -> None:
        if self._current is not None:
            self._current.database.close()
            shutil.rmtree(self._current.keys.directory.parent, ignore_errors=True)
            self._current = None

    def close(self) -> None:
        self._close_current()
        shutil.rmtree(self._root, ignore_errors=True)
