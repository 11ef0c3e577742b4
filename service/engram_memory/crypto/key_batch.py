"""Many new item keys made durable together, for the bulk import (bulk/importer.py).

A single call writes its key with `KeyStore.store_item_key`: temporary file, fsync, rename,
fsync of the shard directory: two flushes per key. A batch shares its flushes: every key is
written to its temporary file, the file system is flushed once (`syncfs`, which covers every
file written), each temporary is renamed into place, and the file system is flushed again
for the directory entries. Where `syncfs` is unavailable each temporary and each shard
directory is fsynced instead. Nothing is skipped: when this returns, every key file and its
directory entry is on stable storage, so the transaction that refers to the keys may commit
(core/item_keys.py). A crash before that leaves only temporaries (destroyed on sight) or keys
no committed row owns (orphans, shredded by the next start's sweep or by the retry).

Each shard is written and renamed under its lock with the state read inside it, as
`store_item_key` does, so a rotation either sees these files or they use its new epoch.
"""

from __future__ import annotations

import ctypes
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from engram_memory._internal.durable_files import fsync_directory, fsync_path, shred
from engram_memory.contract.exceptions import KeyStoreUnavailable, UnknownRootKey
from engram_memory.crypto import keyfile
from engram_memory.crypto.keys import RootKey, scope_tag
from engram_memory.crypto.keystore import KeyStore, name_digest

_TEMPORARY = ".tmp"


def store_item_keys(
    store: KeyStore, root: RootKey, scope_ref: str, items: Sequence[tuple[str, bytes]]
) -> None:
    """Wrap and store the data key of each (item id, data key) of `scope_ref` durably.

    Raises:
        KeyStoreUnavailable: a key could not be made durable (what was written may stay:
            temporaries, or keys no committed row owns, i.e. orphans).
    """
    by_shard: dict[Path, list[tuple[Path, bytes, bytes]]] = defaultdict(list)
    for item_id, data_key in items:
        store.opened.drop(scope_ref, item_id)  # as `store_item_key` does (crypto/key_cache.py)
        path = store.path_for(scope_ref, item_id)
        by_shard[path.parent].append((path, name_digest(scope_ref, item_id), data_key))
    tag = scope_tag(scope_ref)
    temporaries: list[Path] = []
    try:
        for shard, entries in by_shard.items():
            shard.mkdir(exist_ok=True, mode=0o700)
            with store.shard_lock(shard, exclusive=False):
                header = store.current_state(root).header_for(tag)
                for path, digest, data_key in entries:
                    try:
                        blob = keyfile.wrap(root, header, digest, data_key)
                    except UnknownRootKey as exc:
                        raise KeyStoreUnavailable("key state names a root key not held") from exc
                    temporaries.append(_write(path.with_name(path.name + _TEMPORARY), blob))
        _flush(store.directory, temporaries)
        for shard, entries in by_shard.items():
            with store.shard_lock(shard, exclusive=False):
                for path, _, _ in entries:
                    os.replace(path.with_name(path.name + _TEMPORARY), path)
        _flush(store.directory, by_shard, directories=True)
    except OSError as exc:
        _remove(temporaries)
        raise KeyStoreUnavailable("key files cannot be written") from exc
    except BaseException:
        _remove(temporaries)
        raise


def _remove(temporaries: Iterable[Path]) -> None:
    """Best effort: a temporary left behind is destroyed on sight by the next sweep."""
    for temporary in temporaries:
        shred(temporary)


def _write(temporary: Path, data: bytes) -> Path:
    """Raises: OSError: the file system refused (the caller removes the temporaries)."""
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if os.write(fd, data) != len(data):
            raise OSError("short write")
    finally:
        os.close(fd)
    return temporary


def _flush(directory: Path, paths: Iterable[Path], *, directories: bool = False) -> None:
    """Everything written under `directory` on stable storage: one `syncfs` of its file
    system, or an fsync of each of `paths` where `syncfs` is unavailable.

    Raises:
        OSError: a flush failed.
    """
    if _syncfs(directory):
        return
    for path in paths:
        if directories:
            fsync_directory(path)
        else:
            fsync_path(path)


def _syncfs(directory: Path) -> bool:
    """syncfs(2) on `directory`'s file system; False where the C library lacks it.

    Raises:
        OSError: it failed (Linux >= 5.8 reports write-back errors here).
    """
    function = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if function is None:
        return False
    fd = os.open(directory, os.O_RDONLY)
    try:
        if function(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))
    finally:
        os.close(fd)
    return True
