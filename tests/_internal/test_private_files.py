"""private_files.py: the data directory check, trusted-file check and explicit modes."""

from __future__ import annotations

import logging
import os
import pwd
import stat
from pathlib import Path

import pytest

from engram_memory._internal.private_files import (
    MAX_FIX_LINES,
    check_trusted_file,
    make_private,
    make_private_directory,
    secure_data_dir,
)
from engram_memory.contract.exceptions import ConfigurationError

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="creating files owned by another user needs root"
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _loose_store(root: Path) -> Path:
    data_dir = root / "data"
    (data_dir / "keys" / "ab").mkdir(parents=True)
    for name in ("engram.duckdb", "engram.duckdb.wal", "keys/state.json", "keys/ab/x.key"):
        (data_dir / name).write_bytes(b"x")
        (data_dir / name).chmod(0o644)
    for directory in (data_dir, data_dir / "keys", data_dir / "keys" / "ab"):
        directory.chmod(0o755)
    return data_dir


def test_loose_entries_are_tightened_and_each_fix_is_logged_without_content(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = _loose_store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="engram_memory.files"):
        fixes = secure_data_dir(data_dir)
    assert len(fixes) == 7
    for path in [data_dir, *data_dir.rglob("*")]:
        assert _mode(path) == (0o700 if path.is_dir() else 0o600)
    assert len(caplog.records) == 7
    assert f"{data_dir / 'engram.duckdb'} was 0644, now 0600" in caplog.text
    assert f"{data_dir} was 0755, now 0700" in caplog.text
    assert secure_data_dir(data_dir) == []  # a second start has nothing to fix


def test_a_tighter_file_is_left_as_it_is(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / "readonly").write_bytes(b"x")
    (data_dir / "readonly").chmod(0o400)
    assert secure_data_dir(data_dir) == []
    assert _mode(data_dir / "readonly") == 0o400


def test_a_missing_data_directory_is_left_for_the_store_to_create(tmp_path: Path) -> None:
    assert secure_data_dir(tmp_path / "absent") == []
    assert not (tmp_path / "absent").exists()


def test_a_symbolic_link_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"x")
    outside.chmod(0o644)
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / "link").symlink_to(outside)
    (data_dir / "dirlink").symlink_to(tmp_path)
    assert secure_data_dir(data_dir) == []
    assert _mode(outside) == 0o644  # neither through the file link nor the directory link


def test_past_the_line_limit_one_summary_line_stands_for_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    for index in range(MAX_FIX_LINES + 5):
        (data_dir / f"f{index}").write_bytes(b"x")
        (data_dir / f"f{index}").chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="engram_memory.files"):
        assert len(secure_data_dir(data_dir)) == MAX_FIX_LINES + 5
    assert len(caplog.records) == MAX_FIX_LINES + 1
    assert "5 more entries" in caplog.records[-1].getMessage()


@needs_root
def test_another_users_entry_is_refused_before_anything_changes(tmp_path: Path) -> None:
    data_dir = _loose_store(tmp_path)
    os.chown(data_dir / "keys" / "ab" / "x.key", pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(ConfigurationError) as refused:
        secure_data_dir(data_dir)
    assert "x.key" in str(refused.value)
    assert _mode(data_dir) == 0o755
    assert _mode(data_dir / "engram.duckdb") == 0o644


@pytest.mark.parametrize("mode", [0o666, 0o664, 0o646, 0o622, 0o602])
def test_a_trusted_file_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    keys = tmp_path / "host-keys.pem"
    keys.write_bytes(b"x")
    keys.chmod(mode)
    with pytest.raises(ConfigurationError):
        check_trusted_file(keys, "host keys")


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o444])
def test_a_trusted_file_only_its_owner_can_write_is_accepted(tmp_path: Path, mode: int) -> None:
    keys = tmp_path / "host-keys.pem"
    keys.write_bytes(b"x")
    keys.chmod(mode)
    check_trusted_file(keys, "host keys")


@needs_root
def test_a_trusted_file_of_another_user_is_refused(tmp_path: Path) -> None:
    keys = tmp_path / "host-keys.pem"
    keys.write_bytes(b"x")
    keys.chmod(0o644)
    os.chown(keys, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(ConfigurationError):
        check_trusted_file(keys, "host keys")


def test_a_missing_trusted_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        check_trusted_file(tmp_path / "absent.pem", "host keys")


def test_explicit_modes_hold_under_a_permissive_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        make_private_directory(tmp_path / "a" / "b")
        (tmp_path / "a" / "b" / "f").write_bytes(b"x")
        make_private(tmp_path / "a" / "b" / "f")
        make_private(tmp_path / "absent")  # nothing to do, no error
    finally:
        os.umask(previous)
    assert _mode(tmp_path / "a") == 0o700
    assert _mode(tmp_path / "a" / "b") == 0o700
    assert _mode(tmp_path / "a" / "b" / "f") == 0o600


def test_an_ownership_check_alone_changes_no_mode(tmp_path: Path) -> None:
    data_dir = _loose_store(tmp_path)
    assert secure_data_dir(data_dir, tighten=False) == []
    assert _mode(data_dir) == 0o755
    assert _mode(data_dir / "engram.duckdb") == 0o644
