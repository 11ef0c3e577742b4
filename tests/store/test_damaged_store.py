"""A damaged store file stops the store: never retriable, logged once, never written on; and
an unopenable store says why (held, damaged, not a store, not a directory)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.exceptions import (
    OpenFailure,
    StoreCorrupt,
    StoreOpenFailed,
    StoreUnavailable,
)
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.connection import DATABASE_FILE
from engram_memory.store.database import Database
from engram_memory.store.driver_errors import DriverFailure, classify
from engram_memory.store.integrity import read_every_row
from tests.admin.test_rotation_cli import _get, _service
from tests.harness import fresh_key
from tests.tools.test_tool_rules import CAPTURE, accepted_record, code


def _store_with_a_damaged_block(tmp_path: Path) -> Path:
    database = Database.open(tmp_path)
    with database.transaction() as tx:
        tx.execute("CREATE TABLE filler (n INTEGER, text VARCHAR)")
        tx.execute("INSERT INTO filler SELECT i, repeat('x', 100) || i FROM range(100000) t(i)")
    database.checkpoint()
    database.close()
    path = tmp_path / DATABASE_FILE
    with path.open("r+b") as handle:
        middle = path.stat().st_size // 2
        handle.seek(middle)
        byte = handle.read(1)
        handle.seek(middle)
        handle.write(bytes([byte[0] ^ 0xFF]))
    return path


def test_a_damaged_block_stops_the_store_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _store_with_a_damaged_block(tmp_path)
    database = Database.open(tmp_path)
    caplog.set_level(logging.ERROR, logger="engram_memory.store")
    with pytest.raises(StoreCorrupt), database.transaction() as tx:
        read_every_row(tx)
    assert database.damaged
    for _ in range(2):  # every later call fails closed, and nothing reaches the file
        with pytest.raises(StoreCorrupt), database.transaction() as tx:
            tx.execute("INSERT INTO filler VALUES (1, 'written on a damaged file?')")
    with pytest.raises(StoreCorrupt):
        database.checkpoint()
    damaged_lines = [r for r in caplog.records if "damaged" in r.getMessage()]
    assert len(damaged_lines) == 1
    assert DATABASE_FILE in damaged_lines[0].getMessage()
    database.close()


def test_driver_failures_are_classified_by_kind() -> None:
    assert classify(Exception("Corrupt database file: computed checksum 1")) is (
        DriverFailure.DAMAGED
    )
    assert classify(Exception("FATAL Error: database has been invalidated")) is (
        DriverFailure.DAMAGED
    )
    assert classify(Exception('Could not write file "x.wal": No space left on device')) is (
        DriverFailure.NO_SPACE
    )
    assert classify(Exception("Conflict on tuple deletion")) is DriverFailure.TRANSIENT


def test_a_store_held_by_another_process_names_the_holder_pid(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    try:
        opener = (
            "from pathlib import Path\n"
            "from engram_memory.store.database import Database, StoreOpenFailed\n"
            "try:\n"
            f"    Database.open(Path({str(tmp_path)!r}))\n"
            "except StoreOpenFailed as exc:\n"
            "    print(exc.failure.name)\n"
            "    print(exc.line)\n"
        )
        child = subprocess.run(
            [sys.executable, "-c", opener], capture_output=True, text=True, timeout=60, check=True
        )
    finally:
        database.close()
    kind, line = child.stdout.splitlines()
    assert kind == OpenFailure.HELD.name
    assert f"PID {os.getpid()}" in line


def test_a_file_that_is_not_a_store_is_told_apart(tmp_path: Path) -> None:
    (tmp_path / DATABASE_FILE).write_bytes(b"not a database " * 1000)
    with pytest.raises(StoreOpenFailed) as refused:
        Database.open(tmp_path)
    assert refused.value.failure is OpenFailure.NOT_A_STORE


def test_a_damaged_header_is_told_apart(tmp_path: Path) -> None:
    path = _store_with_a_damaged_block(tmp_path)
    with path.open("r+b") as handle:
        handle.seek(4096 + 16)
        handle.write(b"\xff" * 16)
    with pytest.raises(StoreUnavailable) as refused:
        Database.open(tmp_path)
    assert isinstance(refused.value, StoreOpenFailed)
    assert refused.value.failure is OpenFailure.DAMAGED


def test_a_data_directory_that_is_a_regular_file_is_told_apart(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file, not a directory")
    with pytest.raises(StoreOpenFailed) as refused:
        Database.open(tmp_path / "data")
    assert refused.value.failure is OpenFailure.NOT_A_DIRECTORY


def test_calls_on_a_damaged_store_fail_closed_with_a_non_retriable_code(
    tmp_path: Path, engine: EmbeddedWasmEngine
) -> None:
    root, _, _ = init_host_dir(tmp_path / "secrets")
    data = tmp_path / "data"
    with _service(data, root, engine) as caller:
        record_id = accepted_record(caller, "Kept in a block that will be damaged.")
    path = data / DATABASE_FILE
    intact = path.read_bytes()
    offsets = [i for i in range(len(intact)) if intact.startswith(record_id.encode(), i)]
    # The record id is in several tables; damage the block that opening the store does not
    # read but `get` does (the records table), so the damage is met by a call.
    for offset in offsets:
        damaged = intact[:offset] + bytes([intact[offset] ^ 0xFF]) + intact[offset + 1 :]
        path.write_bytes(damaged)
        try:
            service = _service(data, root, engine)
            caller = service.__enter__()
        except StoreCorrupt:
            continue
        try:
            first = _get(caller, record_id)
            if first["ok"]:
                continue
            assert code(first) == "JOURNAL_CORRUPT"
            assert first["error"]["retriable"] is False
            later = caller.call(CAPTURE, demo_capture_arguments("Damaged file?", fresh_key()))
            assert code(later) == "JOURNAL_CORRUPT"
        finally:
            service.__exit__(None, None, None)
        assert path.read_bytes() == damaged  # nothing committed or checkpointed onto it
        return
    pytest.fail("no block of the records table held the record id")
