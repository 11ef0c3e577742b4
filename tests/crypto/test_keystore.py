"""Key files: durable when stored, overwritten in place and gone when destroyed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from engram_memory.crypto.keystore import KeyStore


def _only_file(directory: Path) -> Path:
    files = [p for p in directory.rglob("*") if p.is_file()]
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
