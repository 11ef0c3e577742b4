"""`audit verify`'s key-directory check: live items need a key, ended items must have none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import KeyDirectoryInconsistent
from engram_memory.crypto.key_audit import verify_key_directory
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore
from engram_memory.crypto.sealing import new_data_key

ROOT = RootKey(os.urandom(32))
SCOPE = "tenant:acme/workspace:support"


@pytest.fixture
def store(tmp_path: Path) -> KeyStore:
    keys = KeyStore(tmp_path / "keys")
    keys.store_item_key(ROOT, SCOPE, "mem_live", new_data_key())
    return keys


def test_a_directory_matching_the_store_passes_and_counts_orphans(store: KeyStore) -> None:
    store.store_item_key(ROOT, SCOPE, "cand_orphan", new_data_key())
    items = [(SCOPE, "mem_live", True), (SCOPE, "cand_promoted", False)]

    report = verify_key_directory(store.directory, items)

    assert (report.key_files, report.live_items, report.orphans) == (2, 1, 1)


def test_a_live_item_without_its_key_fails(store: KeyStore) -> None:
    with pytest.raises(KeyDirectoryInconsistent):
        verify_key_directory(store.directory, [(SCOPE, "mem_live", True), (SCOPE, "x", True)])


def test_a_live_item_whose_key_was_zeroed_fails(store: KeyStore) -> None:
    path = store.path_for(SCOPE, "mem_live")
    path.write_bytes(b"\0" * len(path.read_bytes()))  # a shred interrupted before unlink
    with pytest.raises(KeyDirectoryInconsistent):
        verify_key_directory(store.directory, [(SCOPE, "mem_live", True)])


def test_a_surviving_key_of_an_ended_item_fails_even_when_its_destruction_is_promised(
    store: KeyStore,
) -> None:
    items = [(SCOPE, "mem_live", False)]
    with pytest.raises(KeyDirectoryInconsistent):
        verify_key_directory(store.directory, items)
    with pytest.raises(KeyDirectoryInconsistent):
        verify_key_directory(store.directory, items, promised=[(SCOPE, "mem_live")])


def test_with_the_root_key_a_flipped_byte_anywhere_fails_and_without_it_only_the_shape(
    store: KeyStore,
) -> None:
    path = store.path_for(SCOPE, "mem_live")
    original = path.read_bytes()
    items = [(SCOPE, "mem_live", True)]
    assert verify_key_directory(store.directory, items, root=ROOT).live_items == 1
    for offset in range(len(original)):
        damaged = bytearray(original)
        damaged[offset] ^= 0x80
        path.write_bytes(bytes(damaged))
        with pytest.raises(KeyDirectoryInconsistent):
            verify_key_directory(store.directory, items, root=ROOT)
    damaged = bytearray(original)
    damaged[-1] ^= 0x80  # inside the GCM tag: only authentication sees it
    path.write_bytes(bytes(damaged))
    assert verify_key_directory(store.directory, items).live_items == 1


def test_a_damaged_orphan_is_a_defect_too(store: KeyStore) -> None:
    store.store_item_key(ROOT, SCOPE, "cand_orphan", new_data_key())
    path = store.path_for(SCOPE, "cand_orphan")
    blob = bytearray(path.read_bytes())
    blob[50] ^= 0x01
    path.write_bytes(bytes(blob))
    with pytest.raises(KeyDirectoryInconsistent):
        verify_key_directory(store.directory, [(SCOPE, "mem_live", True)], root=ROOT)
