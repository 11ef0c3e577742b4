"""Files only their owner can read (issue 9 item 6), on the real server process.

A careless or hostile environment: a data directory left 0755 with a 0644 store, WAL and
key files; a trusted host-key file anyone may rewrite; a permissive umask; entries or a
maintenance runtime directory owned by another user. The server tightens what is loose
(logging each fix), refuses what it cannot trust (exit 2, nothing written), and a legitimate
host is served afterwards.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import BINDING, demo_capture_arguments
from engram_memory.client.reference_host import connect, wait_until_listening
from engram_memory.host.keys import HostSigningKey
from engram_memory.store.connection import DATABASE_FILE
from tests.servers import bound_port, server_env

pytestmark = pytest.mark.e2e

WAL_FILE = DATABASE_FILE + ".wal"
SERVE = [sys.executable, "-m", "engram_memory.cli", "serve"]
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="creating files owned by another user needs root"
)


def _permissive_umask() -> None:
    os.umask(0)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _tree(root: Path) -> list[Path]:
    return [root, *sorted(root.rglob("*"))]


def _nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    root_key, _signing, public_keys = init_host_dir(tmp_path / "secrets")
    # A runtime directory of this test's own, with a short path (a Unix socket path is
    # limited to ~107 bytes): the maintenance socket lives there.
    runtime = Path(tempfile.mkdtemp(prefix="engram-files-"))
    try:
        yield server_env(tmp_path / "data", root_key, public_keys, XDG_RUNTIME_DIR=str(runtime))
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _signer(env: dict[str, str]) -> HostSigningKey:
    return HostSigningKey.from_pem_file(Path(env["ENGRAM_HOST_KEYS"]).with_name("host-signing.pem"))


@contextmanager
def _http_server(env: dict[str, str], log: Path, *, umask_zero: bool = False) -> Iterator[str]:
    """`serve --transport http` started from a shell with umask 000 when asked; yields its URL
    once it listens (start-up checks done); killed with SIGKILL on exit, so the WAL stays."""
    port_file = log.with_name(f"{log.name}.port")
    port_file.unlink(missing_ok=True)
    with log.open("ab") as stderr:
        process = subprocess.Popen(
            [*SERVE, "--transport", "http", "--port", "0", "--port-file", str(port_file)],
            env=env,
            stderr=stderr,
            preexec_fn=_permissive_umask if umask_zero else None,
        )
    try:
        url = f"http://127.0.0.1:{bound_port(port_file, process)}/mcp"
        wait_until_listening(url, process)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=20)


async def _capture(url: str, env: dict[str, str], text: str) -> dict[str, Any]:
    async with connect(url, _signer(env), BINDING) as host:
        outcome = await host.call(
            "engram_memory_capture", demo_capture_arguments(text, f"files-{uuid.uuid4().hex}")
        )
    assert outcome.envelope["ok"] is True, outcome.envelope
    value: dict[str, Any] = outcome.envelope["output"]["value"]
    return value


def _refused_start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVE, "--transport", "stdio"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_a_loose_data_directory_is_tightened_at_start_with_one_log_line_per_fix(
    env: dict[str, str], tmp_path: Path
) -> None:
    data_dir = Path(env["ENGRAM_DATA_DIR"])
    with _http_server(env, tmp_path / "first.log") as url:
        await _capture(url, env, "Refund approved for case 7.")
    # Killed mid-life: the WAL is still there, as after a crash.
    assert (data_dir / WAL_FILE).is_file()
    assert any((data_dir / "keys").rglob("*.key"))
    for path in _tree(data_dir):
        path.chmod(0o755 if path.is_dir() else 0o644)

    log = tmp_path / "second.log"
    with _http_server(env, log) as url:
        for path in _tree(data_dir):
            assert _mode(path) == (0o700 if path.is_dir() else 0o600), path
        lines = log.read_text().splitlines()
        fixed = [line for line in lines if "file modes:" in line]
        assert fixed
        for path in _tree(data_dir):
            old, new = ("0755", "0700") if path.is_dir() else ("0644", "0600")
            matching = [line for line in fixed if f" {path} was {old}, now {new}" in line]
            assert len(matching) == 1, path
        # The legitimate host is served from the tightened store.
        assert (await _capture(url, env, "Second refund approved."))["status"] == (
            "committed_pending"
        )


async def test_files_are_private_under_a_permissive_umask_and_exports_and_backups_too(
    env: dict[str, str], tmp_path: Path
) -> None:
    data_dir = Path(env["ENGRAM_DATA_DIR"])
    with _http_server(env, tmp_path / "serve.log", umask_zero=True) as url:
        await _capture(url, env, "Refund approved under umask 000.")
        assert (data_dir / WAL_FILE).is_file()
        for path in _tree(data_dir):
            assert _mode(path) == (0o700 if path.is_dir() else 0o600), path
    exports, archive = tmp_path / "exports" / "today", tmp_path / "nightly.backup"
    who = ["--tenant", "acme", "--workspace", "support", "--operator", "human:dana"]
    for argv in (
        ["audit", "export", "--data-dir", str(data_dir), "--out", str(exports)],
        ["admin", *who, "backup", "--out", str(archive)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "engram_memory.cli", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            preexec_fn=_permissive_umask,
        )
        assert done.returncode == 0, done.stderr
    assert _mode(exports) == 0o700
    assert _mode(exports.parent) == 0o700
    assert {p.name for p in exports.iterdir()} >= {"manifest.json", "audit_entries.parquet"}
    for path in exports.iterdir():
        assert _mode(path) == 0o600, path
    assert _mode(archive) == 0o600
    for path in _tree(data_dir):
        assert _mode(path) == (0o700 if path.is_dir() else 0o600), path


@pytest.mark.parametrize("mode", [0o666, 0o620])
def test_a_host_key_file_others_can_rewrite_is_refused_and_nothing_is_written(
    env: dict[str, str], mode: int
) -> None:
    Path(env["ENGRAM_HOST_KEYS"]).chmod(mode)
    refused = _refused_start(env)
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "host keys" in refused.stderr
    assert not Path(env["ENGRAM_DATA_DIR"]).exists()


@needs_root
def test_a_host_key_file_owned_by_another_user_is_refused(env: dict[str, str]) -> None:
    os.chown(env["ENGRAM_HOST_KEYS"], _nobody(), -1)
    refused = _refused_start(env)
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1
    assert not Path(env["ENGRAM_DATA_DIR"]).exists()


@needs_root
@pytest.mark.parametrize("owned", ["data_dir", "key_file"])
def test_a_data_directory_entry_owned_by_another_user_is_refused_and_left_unchanged(
    env: dict[str, str], owned: str
) -> None:
    # Ownership is checked before the store is opened, so stand-in files do.
    data_dir = Path(env["ENGRAM_DATA_DIR"])
    (data_dir / "keys" / "ab").mkdir(parents=True, mode=0o700)
    (data_dir / DATABASE_FILE).write_bytes(b"stand-in")
    key_file = data_dir / "keys" / "ab" / ("ab" * 32 + ".key")
    key_file.write_bytes(b"stand-in")
    target = {"data_dir": data_dir, "key_file": key_file}[owned]
    os.chown(target, _nobody(), -1)
    (data_dir / DATABASE_FILE).chmod(0o644)  # loose, but a refused start must not fix it
    before = {path: (path.lstat().st_mode, path.lstat().st_mtime_ns) for path in _tree(data_dir)}
    refused = _refused_start(env)
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1
    assert str(target) in refused.stderr
    after = {path: (path.lstat().st_mode, path.lstat().st_mtime_ns) for path in _tree(data_dir)}
    assert after == before


@needs_root
def test_a_maintenance_runtime_directory_taken_over_by_another_user_is_refused(
    env: dict[str, str], tmp_path: Path
) -> None:
    squatted = Path(env["XDG_RUNTIME_DIR"]) / "engram-memory"
    squatted.mkdir(mode=0o700)
    os.chown(squatted, _nobody(), -1)
    refused = _refused_start(env)
    assert refused.returncode == 2
    assert str(squatted) in refused.stderr
    assert "XDG_RUNTIME_DIR" in refused.stderr  # the documented fix is named
    assert squatted.stat().st_uid == _nobody()  # nothing was taken back silently


def test_a_maintenance_runtime_directory_open_to_others_is_refused(env: dict[str, str]) -> None:
    loose = Path(env["XDG_RUNTIME_DIR"]) / "engram-memory"
    loose.mkdir()
    loose.chmod(0o755)
    refused = _refused_start(env)
    assert refused.returncode == 2
    assert str(loose) in refused.stderr
    assert _mode(loose) == 0o755
