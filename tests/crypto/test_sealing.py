"""Sealed bodies open only under their own key, scope and item id."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import ConfigurationError, SealBroken
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.sealing import new_data_key, open_sealed, seal, unwrap_key, wrap_key


def test_sealed_body_round_trips_under_its_binding() -> None:
    key = new_data_key()
    blob = seal(key, b"memory text", "scope:a", "item:1")
    assert b"memory text" not in blob
    assert open_sealed(key, blob, "scope:a", "item:1") == b"memory text"


@pytest.mark.parametrize(("scope", "item"), [("scope:b", "item:1"), ("scope:a", "item:2")])
def test_sealed_body_copied_to_another_scope_or_item_does_not_open(scope: str, item: str) -> None:
    key = new_data_key()
    blob = seal(key, b"x", "scope:a", "item:1")
    with pytest.raises(SealBroken):
        open_sealed(key, blob, scope, item)


def test_tampered_ciphertext_does_not_open() -> None:
    key = new_data_key()
    blob = bytearray(seal(key, b"x", "s", "i"))
    blob[-1] ^= 1
    with pytest.raises(SealBroken):
        open_sealed(key, bytes(blob), "s", "i")


def test_wrapped_key_opens_only_under_its_scope_key() -> None:
    root = RootKey(os.urandom(32))
    data_key = new_data_key()
    wrapped = wrap_key(root.scope_wrapping_key("s1"), data_key, "s1", "i")
    assert unwrap_key(root.scope_wrapping_key("s1"), wrapped, "s1", "i") == data_key
    with pytest.raises(SealBroken):
        unwrap_key(root.scope_wrapping_key("s2"), wrapped, "s1", "i")


def test_scope_keys_differ_per_scope_and_purpose() -> None:
    root = RootKey(os.urandom(32))
    keys = {root.scope_wrapping_key("a"), root.scope_wrapping_key("b"), root.scope_index_key("a")}
    assert len(keys) == 3


def test_root_key_file_is_created_0600_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "root.key"
    created = RootKey.create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert RootKey.load(path).material == created.material
    assert "redacted" in repr(created)


def test_root_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "root.key"
    RootKey.create(path)
    path.chmod(0o644)
    with pytest.raises(ConfigurationError):
        RootKey.load(path)


def test_existing_root_key_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "root.key"
    RootKey.create(path)
    with pytest.raises(ConfigurationError):
        RootKey.create(path)


def test_root_key_file_lists_current_previous_and_index_root(tmp_path: Path) -> None:
    path = tmp_path / "root.key"
    created = RootKey.create(path)
    assert created.index_root is not None
    rotated = created.rotated()
    rotated.write_new(tmp_path / "rotated.key")
    loaded = RootKey.load(tmp_path / "rotated.key")
    assert loaded == rotated
    assert loaded.known_ids == (rotated.key_id, created.key_id)
    assert loaded.scope_index_key("s") == created.scope_index_key("s")
    assert loaded.page_cursor_secret() == created.page_cursor_secret()
    assert loaded.material_for(created.key_id) == created.material
    assert created.material.hex() not in repr(loaded)


def test_single_line_root_key_files_keep_their_index_keys_through_rotation(
    tmp_path: Path,
) -> None:
    legacy = RootKey(os.urandom(32))  # as written before index roots existed
    rotated = legacy.rotated()
    assert rotated.scope_index_key("s") == legacy.scope_index_key("s")
    assert rotated.without_previous().page_cursor_secret() == legacy.page_cursor_secret()
    assert rotated.without_previous().known_ids == (rotated.key_id,)


def test_root_key_ids_are_stable_and_reveal_nothing_usable() -> None:
    root = RootKey(os.urandom(32))
    assert len(root.key_id) == 8
    assert root.key_id == RootKey(root.material).key_id
    assert root.key_id not in root.material


@pytest.mark.parametrize(
    "text",
    [
        "",
        "engram-index-root-v1:" + "A" * 43,  # an index root alone is no root key
        "engram-root-key-v1:" + "A" * 43 + "\nsomething else",
        "engram-root-key-v1:" + "A" * 42,
    ],
)
def test_malformed_root_key_files_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "root.key"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(ConfigurationError):
        RootKey.load(path)


def test_epoch_wrapping_keys_differ_per_epoch_scope_and_root() -> None:
    root = RootKey(os.urandom(32)).rotated()
    current, previous = root.known_ids
    tag_a, tag_b = b"a" * 16, b"b" * 16
    keys = {
        root.epoch_wrapping_key(current, tag_a, 0),
        root.epoch_wrapping_key(current, tag_a, 1),
        root.epoch_wrapping_key(current, tag_b, 0),
        root.epoch_wrapping_key(previous, tag_a, 0),
    }
    assert len(keys) == 4
