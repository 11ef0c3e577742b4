"""Many new item keys made durable together, for the bulk import (admin/importing.py).

A single call writes its key with `KeyStore.store_item_key`: temporary file, fsync, rename,
fsync of the shard directory, two flushes per key. A batch of keys shares the directory
flushes: per shard, every key is written to its temporary file and flushed, then each is
renamed into place and the shard directory is flushed once. Nothing is skipped: when this
returns, every key file and its directory entry is on stable storage, so the transaction
that refers to the keys may commit (core/item_keys.py). A crash before that leaves only
temporaries (destroyed on sight) or keys no committed row owns (orphans, shredded by the next
start's sweep or by the retry before it writes the key again).

Each shard is handled under its lock with the state read inside it, as `store_item_key`
does, so a rotation either sees these files or they were wrapped under its new epoch.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from engram_memory.crypto import keyfile
from engram_memory.crypto.keys import RootKey, UnknownRootKey, scope_tag
from engram_memory.crypto.keystore import KeyStore, KeyStoreUnavailable, name_digest
from engram_memory.durable_files import fsync_directory, shred

_TEMPORARY = ".tmp"


def store_item_keys(
    store: KeyStore, root: RootKey, scope_ref: str, items: Sequence[tuple[str, bytes]]
) -> None:
    """Wrap and store the data key of each (item id, data key) of `scope_ref` durably.

    Raises:
        KeyStoreUnavailable: a key could not be made durable (the ones written before may
            stay: no committed row owns them, so they are orphans).
    """
    by_shard: dict[Path, list[tuple[Path, bytes, bytes]]] = defaultdict(list)
    tag = scope_tag(scope_ref)
    for item_id, data_key in items:
        path = store.path_for(scope_ref, item_id)
        by_shard[path.parent].append((path, name_digest(scope_ref, item_id), data_key))
    for shard, entries in by_shard.items():
        try:
            shard.mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            raise KeyStoreUnavailable("key directory cannot be created") from exc
        with store.shard_lock(shard, exclusive=False):
            header = store.current_state(root).header_for(tag)
            written: list[tuple[Path, Path]] = []
            for path, digest, data_key in entries:
                try:
                    blob = keyfile.wrap(root, header, digest, data_key)
                except UnknownRootKey as exc:
                    raise KeyStoreUnavailable("key state names a root key not held") from exc
                written.append((_write_flushed(path, blob), path))
            try:
                for temporary, path in written:
                    os.replace(temporary, path)
                fsync_directory(shard)
            except OSError as exc:
                raise KeyStoreUnavailable("key file cannot be written") from exc


def _write_flushed(path: Path, data: bytes) -> Path:
    """Write `data` to `path`'s temporary file and flush it; returns the temporary.

    Raises:
        KeyStoreUnavailable: not durable (the partial temporary is removed).
    """
    temporary = path.with_name(path.name + _TEMPORARY)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if os.write(fd, data) != len(data):
                raise OSError("short write")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        shred(temporary)
        raise KeyStoreUnavailable("key file cannot be written") from exc
    return temporary
