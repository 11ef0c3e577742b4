"""Key files: durable when stored, overwritten in place and gone when destroyed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import KeyFileBroken, KeyStoreUnavailable
from engram_memory.crypto import keyfile
from engram_memory.crypto.keys import RootKey, root_key_id, scope_tag
from engram_memory.crypto.keystore import KeyStore
from engram_memory.crypto.sealing import new_data_key, wrap_key

ROOT = RootKey(os.urandom(32))


def _only_file(directory: Path) -> Path:
    files = [p for p in directory.rglob("*.key") if p.is_file()]
    assert len(files) == 1
    return files[0]


def test_stored_key_reads_back_with_owner_only_mode(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.put("scope:a", "item:1", b"wrapped-bytes")
    assert store.get("scope:a", "item:1") == b"wrapped-bytes"
    assert store.get("scope:b", "item:1") is None
    assert stat.S_IMODE(_only_file(tmp_path / "keys").stat().st_mode) == 0o600


def test_file_names_reveal_no_ids(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.put("tenant:acme/workspace:support", "mem_secretid", b"k")
    assert "mem_secretid" not in str(_only_file(tmp_path / "keys"))


def test_destroy_overwrites_the_bytes_in_place_before_unlinking(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.put("s", "i", b"\x01" * 61)
    witness = tmp_path / "witness"
    os.link(_only_file(tmp_path / "keys"), witness)  # a second name for the same inode
    assert store.destroy("s", "i") is True
    assert store.get("s", "i") is None
    assert witness.read_bytes() == b"\0" * 61


def test_destroy_is_idempotent(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.put("s", "i", b"k")
    assert store.destroy("s", "i") is True
    assert store.destroy("s", "i") is True


def test_item_key_round_trips_with_a_header_naming_root_epoch_and_scope(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    data_key = new_data_key()
    store.store_item_key(ROOT, "scope:a", "item:1", data_key)
    assert store.load_item_key(ROOT, "scope:a", "item:1") == data_key
    header = keyfile.read_header(_only_file(tmp_path / "keys").read_bytes())
    assert (header.root_id, header.epoch, header.tag) == (ROOT.key_id, 0, scope_tag("scope:a"))
    assert store.read_state().root_id == ROOT.key_id
    assert store.load_item_key(ROOT, "scope:a", "item:2") is None


def test_a_key_file_copied_to_another_item_does_not_open(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.store_item_key(ROOT, "scope:a", "item:1", new_data_key())
    blob = store.get("scope:a", "item:1")
    assert blob is not None
    store.put("scope:a", "item:2", blob)
    with pytest.raises(KeyFileBroken):
        store.load_item_key(ROOT, "scope:a", "item:2")


@pytest.mark.parametrize("offset", [0, 4, 11, 12, 15, 16, 31, 32, 50, 91])
def test_a_tampered_key_file_does_not_open(tmp_path: Path, offset: int) -> None:
    store = KeyStore(tmp_path / "keys")
    store.store_item_key(ROOT, "scope:a", "item:1", new_data_key())
    blob = bytearray(store.get("scope:a", "item:1") or b"")
    blob[offset] ^= 0x01
    store.put("scope:a", "item:1", bytes(blob))
    with pytest.raises(KeyFileBroken):
        store.load_item_key(ROOT, "scope:a", "item:1")


def test_a_key_file_under_a_root_not_held_does_not_open(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.store_item_key(ROOT, "scope:a", "item:1", new_data_key())
    with pytest.raises(KeyFileBroken):
        store.load_item_key(RootKey(os.urandom(32)), "scope:a", "item:1")


def test_headerless_key_files_of_earlier_versions_still_open(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    data_key = new_data_key()
    store.put("s", "i", wrap_key(ROOT.scope_wrapping_key("s"), data_key, "s", "i"))
    assert store.load_item_key(ROOT, "s", "i") == data_key
    previous = RootKey(os.urandom(32), previous=(ROOT.material,))
    assert store.load_item_key(previous, "s", "i") == data_key


def test_new_keys_follow_the_state_not_the_rings_current_root(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.store_item_key(ROOT, "s", "first", new_data_key())
    newer = ROOT.rotated()  # knows ROOT as previous; the state still names ROOT
    store.store_item_key(newer, "s", "second", new_data_key())
    header = keyfile.read_header(store.get("s", "second") or b"")
    assert header.root_id == root_key_id(ROOT.material)


def test_a_service_without_the_states_root_refuses_to_store(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.store_item_key(ROOT, "s", "first", new_data_key())
    with pytest.raises(KeyStoreUnavailable):
        store.store_item_key(RootKey(os.urandom(32)), "s", "second", new_data_key())
    assert store.get("s", "second") is None
