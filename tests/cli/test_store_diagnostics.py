"""Startup tells apart why the store cannot be served: one line each, and nothing written.

Held by another process (naming its PID), not a store, and a data directory that is a
regular file are configuration problems (exit 2); a damaged store (exit 4) and a store behind
its head anchor (exit 3) are proven on the real server in tests/faults.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.store.connection import DATABASE_FILE
from engram_memory.store.database import Database

EXIT_CONFIG = 2


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    root, _, public = init_host_dir(tmp_path / "secrets")
    return {
        "PATH": "/usr/bin:/bin",
        "ENGRAM_ROOT_KEY": str(root),
        "ENGRAM_HOST_KEYS": str(public),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
    }


def _serve_refused(env: dict[str, str]) -> str:
    """`serve` exits 2 with exactly one line; returns it."""
    result = subprocess.run(
        [sys.executable, "-m", "engram_memory.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == EXIT_CONFIG, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_store_held_by_another_process_names_its_pid(env: dict[str, str]) -> None:
    holder = Database.open(Path(env["ENGRAM_DATA_DIR"]))
    try:
        line = _serve_refused(env)
    finally:
        holder.close()
    assert f"PID {os.getpid()}" in line


def test_a_file_that_is_not_a_store_is_named_as_such(env: dict[str, str]) -> None:
    data = Path(env["ENGRAM_DATA_DIR"])
    data.mkdir()
    (data / DATABASE_FILE).write_bytes(b"a spreadsheet, perhaps" * 500)
    before = (data / DATABASE_FILE).read_bytes()
    assert "not an engram-memory store" in _serve_refused(env)
    assert (data / DATABASE_FILE).read_bytes() == before


def test_a_data_directory_that_is_a_regular_file_is_named_as_such(env: dict[str, str]) -> None:
    Path(env["ENGRAM_DATA_DIR"]).write_text("not a directory")
    assert "is not a directory" in _serve_refused(env)
