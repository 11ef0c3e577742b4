"""Settle the key directory with the store: at every start before serving, and for auditors.

At start-up (`recover_key_directory`, called by `app.open_service`, which the server and the
admin CLI's direct-store path both use) every key destruction a commit promised and a crash
interrupted is carried out, then temporaries, orphans older than the grace period and keys of
ended items are removed. `audit_key_directory` is `audit verify`'s read-only comparison of
the key directory with the store.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.crypto.key_audit import KeyDirectoryReport, verify_key_directory
from engram_memory.crypto.key_hygiene import SweepReport, sweep_directory
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.store import key_intents
from engram_memory.store.database import Database

ORPHAN_GRACE_ENV = "ENGRAM_ORPHAN_KEY_GRACE_S"
# A key with no committed owner may belong to a call still in flight; ten minutes is far
# beyond any call's deadline.
DEFAULT_ORPHAN_GRACE_S = 600.0

log = logging.getLogger("engram_memory.keys")


@dataclass(frozen=True)
class RecoveryReport:
    destructions_completed: int
    destructions_pending: int  # the file system refused; retried on replay and next start
    sweep: SweepReport


def orphan_grace_s(env: Mapping[str, str] | None = None) -> float:
    """The grace period before an unowned key file counts as an orphan.

    Raises:
        ConfigurationError: `ENGRAM_ORPHAN_KEY_GRACE_S` is not a non-negative number.
    """
    text = (os.environ if env is None else env).get(ORPHAN_GRACE_ENV, "")
    if not text:
        return DEFAULT_ORPHAN_GRACE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses NaN
        raise ConfigurationError(f"{ORPHAN_GRACE_ENV} must be a number of seconds >= 0")
    return value


def recover_key_directory(
    database: Database, keys: KeyStore, *, grace_s: float, now_s: float | None = None
) -> RecoveryReport:
    """Carry out every promised key destruction, then sweep leftovers and orphans.

    Raises:
        StoreUnavailable: the store cannot be read or the promises cleared.
        KeyStoreUnavailable: the key directory cannot be listed or locked.
    """
    with database.transaction() as tx:
        promised = key_intents.pending(tx)
    done = [(scope, item) for scope, item in promised if keys.destroy(scope, item)]
    if done:
        with database.transaction() as tx:
            key_intents.clear(tx, done)
    with database.transaction() as tx:
        names = key_intents.item_key_names(tx)
    sweep = sweep_directory(
        keys, names, grace_s=grace_s, now_s=time.time() if now_s is None else now_s
    )
    report = RecoveryReport(len(done), len(promised) - len(done), sweep)
    # Counts only: item ids are not secret, but a start-up line needs none.
    if report.destructions_completed or sweep.orphans or sweep.ended or sweep.temporaries:
        log.warning(
            "key directory settled at start-up: %d promised destructions completed, "
            "%d orphan keys, %d keys of ended items and %d temporaries removed",
            report.destructions_completed,
            sweep.orphans,
            sweep.ended,
            sweep.temporaries,
        )
    if report.destructions_pending or sweep.failed:
        log.error(
            "key directory: %d promised destructions and %d removals still pending "
            "(the file system refused); retried at the next start",
            report.destructions_pending,
            sweep.failed,
        )
    return report


def audit_key_directory(data_dir: Path, root: RootKey | None = None) -> KeyDirectoryReport:
    """Compare a stopped store's key directory with its rows (read-only), authenticating
    every key file under `root` when given (its shape only without).

    Raises:
        KeyDirectoryInconsistent: a live item lacks its key file, a key file is damaged, or
            an ended item's survives.
        StoreUnavailable / StoreVersionSkew: the store cannot be opened.
    """
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            items = key_intents.item_keys(tx)
            promised = key_intents.pending(tx)
    finally:
        database.close()
    return verify_key_directory(data_dir / KEYS_DIRECTORY, items, promised, root)
