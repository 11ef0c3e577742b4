"""Item keys stored as a batch (crypto/key_batch.py) open like keys stored one by one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engram_memory.crypto import key_batch
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore

SCOPE = "tenant:acme/workspace:support"


def _items(count: int) -> list[tuple[str, bytes]]:
    return [(f"item-{n}", os.urandom(32)) for n in range(count)]


def test_a_batch_of_keys_opens_under_the_root_and_leaves_no_temporary(tmp_path: Path) -> None:
    store, root = KeyStore(tmp_path / "keys"), RootKey(os.urandom(32))
    items = _items(40)
    key_batch.store_item_keys(store, root, SCOPE, items)
    assert [store.load_item_key(root, SCOPE, item) for item, _ in items] == [k for _, k in items]
    assert not list((tmp_path / "keys").glob("*/*.tmp"))


def test_without_syncfs_each_file_and_directory_is_fsynced_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed: list[Path] = []
    monkeypatch.setattr(key_batch, "_syncfs", lambda _directory: False)
    monkeypatch.setattr(key_batch, "fsync_path", flushed.append)
    monkeypatch.setattr(key_batch, "fsync_directory", flushed.append)
    store, root = KeyStore(tmp_path / "keys"), RootKey(os.urandom(32))
    items = _items(3)
    key_batch.store_item_keys(store, root, SCOPE, items)
    files = {
        store.path_for(SCOPE, item).with_name(store.file_name(SCOPE, item) + ".tmp")
        for item, _ in items
    }
    shards = {store.path_for(SCOPE, item).parent for item, _ in items}
    assert set(flushed) == files | shards
    assert [store.load_item_key(root, SCOPE, item) for item, _ in items] == [k for _, k in items]
