"""Start-up's background scan of the key files (issue 23, finding 7): each damaged file is
one log line naming it, a sound directory none, and a stop ends the scan early."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from engram_memory.crypto.key_scan import KeyFileScan
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore
from engram_memory.crypto.sealing import new_data_key

ROOT = RootKey(os.urandom(32))
SCOPE = "tenant:acme/workspace:support"
DAMAGE_LINE = "key file damaged"


@pytest.fixture
def store(tmp_path: Path) -> KeyStore:
    keys = KeyStore(tmp_path / "keys")
    for index in range(20):
        keys.store_item_key(ROOT, SCOPE, f"mem_{index}", new_data_key())
    return keys


def _flip(path: Path, offset: int) -> None:
    damaged = bytearray(path.read_bytes())
    damaged[offset] ^= 0x01
    path.write_bytes(bytes(damaged))


def _damage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(DAMAGE_LINE)]


def test_a_sound_directory_is_authenticated_and_logs_no_damage(
    store: KeyStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "engram_memory.keys")
    report = KeyFileScan(store, ROOT).run()
    assert (report.files, report.damaged, report.complete) == (20, 0, True)
    assert _damage_lines(caplog) == []


def test_each_damaged_file_is_one_line_naming_it(
    store: KeyStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "engram_memory.keys")
    paths = sorted(store.directory.glob("??/*.key"))
    # a byte of the wrapped key, of the header (scope tag), of the GCM tag
    for path, offset in zip(paths[:3], (50, 20, 85), strict=True):
        _flip(path, offset)
    report = KeyFileScan(store, ROOT).run()
    assert (report.files, report.damaged) == (20, 3)
    lines = _damage_lines(caplog)
    assert len(lines) == 3
    for path in paths[:3]:
        assert sum(f"keys/{path.parent.name}/{path.name}" in line for line in lines) == 1


def test_a_file_under_a_root_the_ring_does_not_hold_is_damaged(
    store: KeyStore, caplog: pytest.LogCaptureFixture
) -> None:
    report = KeyFileScan(store, RootKey(os.urandom(32))).run()
    assert report.damaged == 20


def test_a_stopped_scan_ends_before_the_last_file(store: KeyStore) -> None:
    scan = KeyFileScan(store, ROOT)
    scan.stop()
    report = scan.run()
    assert (report.files, report.complete) == (0, False)


def test_the_background_scan_reports_when_started(store: KeyStore) -> None:
    _flip(sorted(store.directory.glob("??/*.key"))[0], 50)
    scan = KeyFileScan(store, ROOT)
    scan.start()
    scan.stop()  # joins: the thread either finished or stopped between files
    assert scan.report is not None
    assert scan.report.damaged <= 1
