"""Assemble the service from configuration: keys first, then policy, then the store.

Everything that can be wrong with the configuration is checked before the store is opened,
so a bad configuration writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from engram_memory.config import ServiceConfig
from engram_memory.contract.errors import ConfigurationError
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.factory import open_policy_engine
from engram_memory.store.database import Database, StoreUnavailable, StoreVersionSkew
from engram_memory.tools.dispatch import MemoryService
from engram_memory.tools.runtime import Services, ServiceSettings


def _clock_ms() -> int:
    return time.time_ns() // 1_000_000


@contextmanager
def open_service(config: ServiceConfig) -> Iterator[MemoryService]:
    """Raises: ConfigurationError: keys, policy engine or store unusable (one line, named)."""
    root_key = RootKey.load(config.root_key)
    host_keys = HostKeyring.from_file(config.host_keys)
    with open_policy_engine(config.policy, config.bundle) as (engine, identity):
        try:
            database = Database.open(config.data_dir)
        except StoreVersionSkew as exc:
            raise ConfigurationError(f"store in {config.data_dir}: {exc}") from exc
        except StoreUnavailable as exc:
            raise ConfigurationError(
                f"store in {config.data_dir} cannot be opened (is another server using it?)"
            ) from exc
        try:
            yield MemoryService(
                Services(
                    database=database,
                    keys=KeyStore(config.data_dir / KEYS_DIRECTORY),
                    decider=PolicyDecider(engine, identity, _clock_ms),
                    root_key=root_key,
                    host_keys=host_keys,
                    settings=ServiceSettings(host_memory_enabled=config.memory_enabled),
                    clock_ms=_clock_ms,
                )
            )
        finally:
            database.close()
