"""Unwrapped item keys in memory (crypto/key_cache.py): a destroyed key never stays, a read
racing a destruction cannot put it back, a file changed behind the store's back is read again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import KeyFileBroken
from engram_memory.crypto.key_cache import OpenedKeys
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore

SCOPE = "tenant:acme/workspace:support"


@pytest.fixture
def store(tmp_path: Path) -> KeyStore:
    return KeyStore(tmp_path / "keys")


@pytest.fixture
def root() -> RootKey:
    return RootKey(os.urandom(32))


def test_a_loaded_key_is_kept_and_destroying_its_file_drops_it(
    store: KeyStore, root: RootKey
) -> None:
    data_key = os.urandom(32)
    store.store_item_key(root, SCOPE, "mem_a", data_key)
    assert not store.opened.holds(SCOPE, "mem_a")  # written, not yet read

    assert store.load_item_key(root, SCOPE, "mem_a") == data_key
    assert store.opened.holds(SCOPE, "mem_a")

    assert store.destroy(SCOPE, "mem_a")
    assert not store.opened.holds(SCOPE, "mem_a")
    assert store.load_item_key(root, SCOPE, "mem_a") is None


def test_a_key_read_while_it_was_destroyed_is_not_kept() -> None:
    opened = OpenedKeys()
    version = opened.version()  # a read began
    opened.drop(SCOPE, "mem_a")  # the destruction

    opened.keep(SCOPE, "mem_a", b"k" * 32, ("p", 1, 2, 3), version)

    assert not opened.holds(SCOPE, "mem_a")


def test_a_key_file_rewritten_behind_the_stores_back_is_read_again(
    store: KeyStore, root: RootKey
) -> None:
    store.store_item_key(root, SCOPE, "mem_a", os.urandom(32))
    store.load_item_key(root, SCOPE, "mem_a")
    path = store.path_for(SCOPE, "mem_a")
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0x01
    path.write_bytes(bytes(blob))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # whatever the clock

    with pytest.raises(KeyFileBroken):
        store.load_item_key(root, SCOPE, "mem_a")


def test_a_new_key_for_the_same_item_replaces_the_kept_one(store: KeyStore, root: RootKey) -> None:
    store.store_item_key(root, SCOPE, "mem_a", b"a" * 32)
    store.load_item_key(root, SCOPE, "mem_a")
    store.store_item_key(root, SCOPE, "mem_a", b"b" * 32)

    assert store.load_item_key(root, SCOPE, "mem_a") == b"b" * 32


def test_the_bound_keeps_the_most_recently_used_keys() -> None:
    opened = OpenedKeys(max_keys=2)
    for item in ("a", "b"):
        opened.keep(SCOPE, item, item.encode() * 32, ("p", 1, 1, 1), opened.version())
    opened.get(SCOPE, "a")
    opened.keep(SCOPE, "c", b"c" * 32, ("p", 1, 1, 1), opened.version())

    assert [opened.holds(SCOPE, item) for item in "abc"] == [True, False, True]
    opened.resize(0)
    assert len(opened) == 0
