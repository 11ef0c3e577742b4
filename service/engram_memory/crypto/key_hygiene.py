"""Keep the key directory to what the store needs: no leftovers, no orphans, no ended keys.

Item keys are written and fsynced before the transaction that needs them opens, so that the
writer's critical section holds no key fsync. A key whose transaction then fails, or whose
process died before COMMIT, is an orphan: no committed row owns it, so it opens nothing that
was ever acknowledged. Temporaries (`*.tmp`, `*.rot`) are what an interrupted write or
rotation leaves, including the empty ones a full disk leaves.

Key file names are digests of (scope, item), so the caller passes the items the store knows
(`store.key_intents.item_keys`) and this module computes the names they own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from engram_memory._internal.durable_files import shred
from engram_memory.contract.exceptions import KeyStoreUnavailable
from engram_memory.crypto.keystore import KEY_SUFFIX, STATE_FILE, TEMPORARY_SUFFIXES, KeyStore

# (scope_ref, item_id, live): live when the item's content still needs its key.
ItemKeys = Iterable[tuple[str, str, bool]]


@dataclass
class SweepReport:
    """What a sweep removed and what it kept for now."""

    temporaries: int = 0
    orphans: int = 0  # no committed owner, older than the grace period
    ended: int = 0  # owned by an item whose content ended (a destruction was missed)
    young_orphans: int = 0  # no owner yet, within the grace period: possibly in flight
    failed: int = 0  # the file system refused to remove it

    def as_json(self) -> dict[str, int]:
        return asdict(self)


def sweep_temporaries(store: KeyStore, shard: Path) -> int:
    """Shred the leftovers of interrupted writes in one shard; returns how many.

    Writers hold the shard lock shared for the whole write, so under the exclusive lock any
    temporary is an interrupted one.

    Raises:
        KeyStoreUnavailable: the shard cannot be locked or listed.
    """
    with store.shard_lock(shard, exclusive=True):
        return _shred_all(_temporaries(shard))


def file_names(items: ItemKeys) -> tuple[set[str], set[str]]:
    """The key file names of `items`: (those still needed, those of ended items)."""
    live: set[str] = set()
    ended: set[str] = set()
    for scope_ref, item_id, needed in items:
        (live if needed else ended).add(KeyStore.file_name(scope_ref, item_id))
    return live, ended


def sweep_directory(
    store: KeyStore, names: tuple[set[str], set[str]], *, grace_s: float, now_s: float
) -> SweepReport:
    """Shred temporaries, orphans older than `grace_s` and the keys of ended items, given
    the key file `names` the store knows (`file_names`, or the store's own query).

    Keys of live items, and orphans younger than the grace period or claimed by a call in
    flight, are kept.

    Raises:
        KeyStoreUnavailable: the directory or a shard cannot be listed or locked.
    """
    live, ended = names
    ended = ended - live  # never the case for distinct items; a live owner always wins
    report = SweepReport()
    state_temporary = store.directory / (STATE_FILE + ".tmp")
    report.temporaries += _shred_all([state_temporary] if state_temporary.exists() else [])
    for shard in store.shards():
        with store.shard_lock(shard, exclusive=True):
            listed = _names(shard)  # one listing: nothing writes the shard under this lock
            report.temporaries += _shred_all(
                [shard / name for name in listed if name.endswith(TEMPORARY_SUFFIXES)]
            )
            # Names, not Paths, until one is acted on: 100k Paths cost seconds at start.
            for name in sorted(n for n in listed if n.endswith(KEY_SUFFIX)):
                if name in live:
                    continue
                path = shard / name
                if store.claims.held(path):
                    continue
                if name in ended:
                    report.ended += 1
                elif _age_s(path, now_s) < grace_s:
                    report.young_orphans += 1
                    continue
                else:
                    report.orphans += 1
                if not shred(path):
                    report.failed += 1
    return report


def _temporaries(shard: Path) -> list[Path]:
    try:
        return [p for p in shard.iterdir() if p.name.endswith(TEMPORARY_SUFFIXES)]
    except OSError as exc:
        raise KeyStoreUnavailable("key directory cannot be listed") from exc


def _names(shard: Path) -> list[str]:
    try:
        return os.listdir(shard)
    except OSError as exc:
        raise KeyStoreUnavailable("key directory cannot be listed") from exc


def _shred_all(paths: list[Path]) -> int:
    return sum(1 for path in paths if shred(path))


def _age_s(path: Path, now_s: float) -> float:
    try:
        return now_s - os.stat(path).st_mtime
    except FileNotFoundError:
        return float("inf")
