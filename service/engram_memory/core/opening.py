"""Open the store, keys and policy engine that every entry point shares, as `Services`.

`serve` (server/app.py) wraps them in the agent service; `admin`, `import` and `audit`
commands open them directly when no server holds the data directory. Either way the store
is compared with its head anchor, interrupted key destructions are completed, and the data
directory is tightened before anything is served.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from engram_memory._internal.private_files import check_data_dir
from engram_memory.contract.exceptions import (
    ConfigurationError,
    KeyStoreUnavailable,
    OpenFailure,
    StoreCorrupt,
    StoreDamaged,
    StoreOpenFailed,
    StoreUnavailable,
    StoreVersionSkew,
)
from engram_memory.core.checkpoints import CheckpointWriter, load_checkpoint_key
from engram_memory.core.failpoints import pause_opening
from engram_memory.core.forgotten import key_forgotten_rows
from engram_memory.core.index_loading import keep_at_stop, semantic_keeping
from engram_memory.core.kept_vectors import VectorKeeping
from engram_memory.core.key_recovery import orphan_grace_s, recover_key_directory
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.core.search_index import SearchIndex, SemanticSetup
from engram_memory.core.semantic_index import body_opener
from engram_memory.core.service_config import ServiceConfig
from engram_memory.core.serving_threads import ServingThreads
from engram_memory.core.startup_audit import verify_trail_at_startup
from engram_memory.core.store_cache import store_cache_mib
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.fleet import open_policy
from engram_memory.search.embedding import Unavailable, load_embedding_model
from engram_memory.store.anchors import open_anchor
from engram_memory.store.call_log import DIRECTORY as CALL_LOG_DIRECTORY
from engram_memory.store.call_log import SegmentLog
from engram_memory.store.database import Database
from engram_memory.store.side_writes import sweep_orphan_index

log = logging.getLogger("engram_memory.opening")


def _clock_ms() -> int:
    return time.time_ns() // 1_000_000


def open_store(
    config: ServiceConfig, root_key: RootKey, *, tolerate_loss: bool = False
) -> Database:
    """The store of `config`, compared with its head anchor and attached to it.

    With `tolerate_loss` (only `admin accept-loss`) a loss is kept on `database.anchor`.

    Raises:
        ConfigurationError: held by another process (with its PID), not a store, a data
            directory that is a file, a schema skew, or otherwise unopenable (exit 2).
        StoreDamaged: the file failed a checksum or header check (exit 4).
        StoreBehindAnchor: the store lacks acknowledged writes (exit 3).
    """
    where = config.data_dir
    try:
        database = Database.open(where, announce_damage=False, read_kept_index=True)
    except StoreVersionSkew as exc:
        raise ConfigurationError(f"store in {where}: {exc}") from exc
    except StoreOpenFailed as exc:
        if exc.failure is OpenFailure.DAMAGED:
            raise StoreDamaged(exc.line) from exc
        raise ConfigurationError(exc.line) from exc
    except StoreCorrupt as exc:
        raise StoreDamaged(
            f"store file in {where} is damaged (a block failed its checksum)"
        ) from exc
    except StoreUnavailable as exc:
        raise ConfigurationError(f"store in {where} cannot be opened") from exc
    try:
        # The calls acknowledged through the log but not yet in the file: the anchor
        # comparison sees them where they are; the first transaction writes them.
        _attach_call_log(database, config, root_key)
        # No full read here: every block a call reads is checked by DuckDB as it is read, and
        # the blocks no call reads are read once serving started (core/integrity_scan.py).
        open_anchor(database, where, root_key.head_anchor_key(), tolerate_loss=tolerate_loss)
        # Only a store that will be served is changed: index rows an admission staged but
        # never committed go (core/indexing.py); a no-op read when there are none.
        with database.transaction() as tx:
            sweep_orphan_index(tx)
        # Items forgotten by an earlier build keep only keyed digests from here on.
        key_forgotten_rows(database, root_key)
        database.announce_damage = True  # serving from here: damage is logged once
    except StoreCorrupt as exc:
        database.close(checkpoint=False)
        raise StoreDamaged(
            f"store file in {where} is damaged (a block failed its checksum)"
        ) from exc
    except StoreUnavailable as exc:
        database.close(checkpoint=False)
        raise ConfigurationError(f"head anchor in {where} cannot be written") from exc
    except BaseException:
        database.close(checkpoint=False)
        raise
    return database


def _attach_call_log(database: Database, config: ServiceConfig, root_key: RootKey) -> None:
    """Open the call log and replay into the store what it holds beyond the projection.

    Raises:
        StoreDamaged: a record fails its check, or the log lacks records the store
            projected or expects (removed, or an older copy put back).
        ConfigurationError: the log cannot be read or created.
    """
    where = config.data_dir / CALL_LOG_DIRECTORY
    try:
        call_log = SegmentLog(where, root_key.call_log_key())
    except StoreCorrupt as exc:
        raise StoreDamaged(f"call log in {where} is damaged ({exc})") from exc
    except StoreUnavailable as exc:
        raise ConfigurationError(f"call log in {where} cannot be opened") from exc
    try:
        database.attach_call_log(call_log, project=False)  # written once the anchor agrees
    except StoreCorrupt as exc:
        call_log.close()
        raise StoreDamaged(f"call log in {where} does not match the store ({exc})") from exc
    except BaseException:
        call_log.close()
        raise


@contextmanager
def open_services(config: ServiceConfig, *, tolerate_loss: bool = False) -> Iterator[Services]:
    """Raises: ConfigurationError: keys, data directory (another user's entry), policy
    engine or store unusable (one line, named);
    StoreDamaged / StoreBehindAnchor: the store must not be served (see `open_store`);
    AuditTrailUntrusted: an audit entry was rewritten since the last signed checkpoint."""
    root_key = RootKey.load(config.root_key)
    host_keys = HostKeyring.from_file(config.host_keys, config.store_audience)
    checkpoint_key = load_checkpoint_key(config.checkpoint_key)
    # Before anything is written: a data directory holding another user's entry is refused.
    entries = check_data_dir(config.data_dir)
    grace_s = orphan_grace_s()
    cache_mib = store_cache_mib()
    with open_policy(
        config.policy,
        config.bundle,
        verification_key=config.bundle_verification_key,
        bundle_service=config.bundle_service,
    ) as (engine, identity):
        pause_opening()  # test-only: a slow store, on demand (core/failpoints.py)
        database = open_store(config, root_key, tolerate_loss=tolerate_loss)
        try:
            startup_audit = None
            if not tolerate_loss:  # accept-loss repairs a store that cannot pass this yet
                public = None if checkpoint_key is None else checkpoint_key.public
                startup_audit = verify_trail_at_startup(database, public)
            keys = _key_store(config)
            search_index = SearchIndex(_semantic_keeping(database, keys, root_key))
            # The index loads from here, beside the settling below and then while calls are
            # served (core/serving_threads.py).
            threads = ServingThreads(database, keys, root_key, search_index, cache_mib)
            threads.start()
            served = False
            try:
                # The store will be served: what was found looser than 0700/0600 is tightened.
                entries.tighten()
                _settle_keys(database, keys, config, grace_s)
                database.read_cache.resize(config.read_cache_mib * 1024 * 1024)
                keys.opened.resize(config.read_cache_keys)
                services = Services(
                    database=database,
                    keys=keys,
                    decider=PolicyDecider(engine, identity, _clock_ms),
                    root_key=root_key,
                    host_keys=host_keys,
                    settings=ServiceSettings(
                        host_memory_enabled=config.memory_enabled,
                        refusal_burst=config.refusal_burst,
                        refusal_interval_ms=config.refusal_interval_s * 1000,
                        decision_input_retention_days=config.decision_input_retention_days,
                    ),
                    clock_ms=_clock_ms,
                    search_index=search_index,
                    checkpoint_key=checkpoint_key,
                    startup_audit=startup_audit,
                )
                # Served from here: DuckDB follows the call log while the writer is idle.
                database.start_projector(services.settings.failpoints.projection_probe)
                checkpoints = None
                if checkpoint_key is not None:
                    checkpoints = CheckpointWriter(
                        database, checkpoint_key, config.checkpoint_interval_s * 1000, _clock_ms
                    )
                    checkpoints.start()
                try:
                    served = True
                    yield services
                finally:
                    if checkpoints is not None:
                        checkpoints.close()
            finally:
                # The next start loads this index instead of reading the store, if it still
                # followed every commit (an import, say, detaches it and writes around it).
                keep = (
                    served and threads.index_following() and services.search_index is search_index
                )
                threads.stop()
                if keep:
                    keep_at_stop(database, search_index, root_key.kept_index_key())
        finally:
            database.index_commits.follow(None)
            database.close()


def _semantic_keeping(
    database: Database, keys: KeyStore, root_key: RootKey
) -> VectorKeeping | None:
    setup = _semantic_setup(keys, root_key)
    return None if setup is None else semantic_keeping(database, setup)


def _semantic_setup(keys: KeyStore, root_key: RootKey) -> SemanticSetup | None:
    """The semantic channel's setup when its model loads, else None after one start-up line
    saying why (searches requiring it then answer RANKING_UNAVAILABLE)."""
    model = load_embedding_model()
    if isinstance(model, Unavailable):
        log.info("semantic channel unavailable: %s", model.reason)
        return None
    log.info("semantic channel model loaded: %s", model.model_ref)
    return SemanticSetup(
        model, body_opener(keys, root_key), root_key.scope_index_key, root_key.scope_vector_key
    )


def _key_store(config: ServiceConfig) -> KeyStore:
    """Raises: ConfigurationError: the key directory cannot be made."""
    try:
        return KeyStore(config.data_dir / KEYS_DIRECTORY)
    except KeyStoreUnavailable as exc:
        raise ConfigurationError(f"key directory in {config.data_dir} unusable ({exc})") from exc


def _settle_keys(database: Database, keys: KeyStore, config: ServiceConfig, grace_s: float) -> None:
    """Carry out every key destruction a crash interrupted and remove leftovers and orphans:
    before anything is served.

    Raises:
        ConfigurationError: the key directory cannot be settled (nothing is served).
    """
    try:
        recover_key_directory(database, keys, grace_s=grace_s)
    except (KeyStoreUnavailable, StoreUnavailable) as exc:
        raise ConfigurationError(
            f"key directory in {config.data_dir} cannot be settled with the store ({exc})"
        ) from exc
