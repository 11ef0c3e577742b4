"""The re-wrap sweep on its own: upgrades old files, races safely with key operations."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import ConfigurationError, KeyStoreBusy
from engram_memory.crypto import keyfile
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore
from engram_memory.crypto.rotation import rotate_root_key, rotate_scope_key
from engram_memory.crypto.sealing import new_data_key, wrap_key

ROOT = RootKey(os.urandom(32))


def _quiet(_: str) -> None:
    return None


def _all_bytes(directory: Path) -> list[bytes]:
    return [p.read_bytes() for p in directory.rglob("*") if p.is_file()]


def test_headerless_files_are_upgraded_when_the_store_names_their_items(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    keys = {f"item:{i}": new_data_key() for i in range(3)}
    for item, data_key in keys.items():
        store.put("s", item, wrap_key(ROOT.scope_wrapping_key("s"), data_key, "s", item))
    legacy = {store.path_for("s", item).name: ("s", item) for item in keys}

    outcome = rotate_scope_key(store, ROOT, "s", _quiet, legacy)

    assert (outcome.report.upgraded, outcome.complete) == (3, True)
    for item, data_key in keys.items():
        assert keyfile.read_header(store.get("s", item) or b"").epoch == 1
        assert store.load_item_key(ROOT, "s", item) == data_key


def test_a_root_sweep_that_cannot_name_a_headerless_file_stays_pending(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.put("s", "orphan", wrap_key(ROOT.scope_wrapping_key("s"), new_data_key(), "s", "x"))
    outcome = rotate_root_key(store, ROOT.rotated(), _quiet, legacy={})
    assert (outcome.report.unreadable, outcome.complete) == (1, False)
    assert store.read_state().pending == ["root"]


def test_scope_rotation_leaves_other_scopes_alone(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.store_item_key(ROOT, "a", "i", new_data_key())
    store.store_item_key(ROOT, "b", "i", new_data_key())
    before = store.get("b", "i")
    rotate_scope_key(store, ROOT, "a", _quiet)
    assert store.get("b", "i") == before
    assert keyfile.read_header(store.get("a", "i") or b"").epoch == 1


def test_only_one_rotation_runs_at_a_time(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    with store.rotation_lock(), pytest.raises(KeyStoreBusy):
        rotate_scope_key(store, ROOT, "s", _quiet)


def test_a_ring_without_the_stores_root_is_refused_before_anything_changes(
    tmp_path: Path,
) -> None:
    store = KeyStore(tmp_path / "keys")
    store.store_item_key(ROOT, "s", "i", new_data_key())
    with pytest.raises(ConfigurationError):
        rotate_root_key(store, RootKey(os.urandom(32)), _quiet)
    assert store.read_state().root_id == ROOT.key_id
    assert store.read_state().pending == []


def test_keys_stored_and_destroyed_while_a_rotation_runs_end_up_exactly_right(
    tmp_path: Path,
) -> None:
    store = KeyStore(tmp_path / "keys")
    kept = {f"kept:{i}": new_data_key() for i in range(40)}
    doomed = [f"doomed:{i}" for i in range(40)]
    for item, data_key in kept.items():
        store.store_item_key(ROOT, "s", item, data_key)
    for item in doomed:
        store.store_item_key(ROOT, "s", item, new_data_key())
    doomed_bytes = [store.get("s", item) or b"" for item in doomed]
    new_root = ROOT.rotated()
    late = {f"late:{i}": new_data_key() for i in range(20)}
    seen: list[bytes] = []
    go = threading.Barrier(3)

    def destroyer() -> None:
        go.wait()
        for item in doomed:
            seen.append(store.get("s", item) or b"")  # whatever the rotation made of it
            assert store.destroy("s", item)

    def writer() -> None:
        go.wait()
        for item, data_key in late.items():
            store.store_item_key(new_root, "s", item, data_key)

    threads = [threading.Thread(target=destroyer), threading.Thread(target=writer)]
    for thread in threads:
        thread.start()
    go.wait()
    outcome = rotate_root_key(store, new_root, _quiet, batch=4)
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()

    assert outcome.complete
    for item in doomed:
        assert store.get("s", item) is None
    everything = b"".join(_all_bytes(tmp_path / "keys"))
    for blob in doomed_bytes + [b for b in seen if b]:
        assert blob not in everything
    retired = new_root.without_previous()
    for item, data_key in {**kept, **late}.items():
        assert store.load_item_key(retired, "s", item) == data_key
