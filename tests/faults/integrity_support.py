"""Shared steps of the store-integrity faults: a real server process acknowledges writes and is
killed; the store is then damaged on disk and the next start, `audit verify` and
`admin accept-loss` are run as an operator would run them."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import Binding, connect
from engram_memory.host.keys import HostSigningKey
from engram_memory.store.connection import DATABASE_FILE
from engram_memory.store.database import Database
from tests.cli_runner import run_cli
from tests.servers import http_server, server_env

ALICE = Binding(
    tenant="acme", workspace="support", principal="user:alice", purpose_ref="purpose:support-case"
)
CAPTURE = "engram_memory_capture"
OPERATOR = "human:dana"  # holds `maintain` in acme/support (policies/acme.yaml)
EXIT_BEHIND_ANCHOR = 3
EXIT_DAMAGED = 4
START_TIMEOUT_S = 60


@dataclass
class Acknowledged:
    """A data directory whose server acknowledged `captures` and was then SIGKILLed."""

    data_dir: Path
    env: dict[str, str]
    signer: HostSigningKey
    captures: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # (args, id)

    def copy_to(self, target: Path) -> Acknowledged:
        """The same killed store in another directory (the secrets stay shared)."""
        shutil.copytree(self.data_dir, target)
        env = {**self.env, "ENGRAM_DATA_DIR": str(target)}
        return Acknowledged(target, env, self.signer, list(self.captures))

    @property
    def wal(self) -> Path:
        return self.data_dir / (DATABASE_FILE + ".wal")


def capture_value(outcome: Any) -> dict[str, Any]:
    assert outcome.envelope["ok"] is True, outcome.envelope
    value: dict[str, Any] = outcome.envelope["output"]["value"]
    return value


async def acknowledge_then_kill(tmp_path: Path, count: int) -> Acknowledged:
    """Start a server, get `count` captures acknowledged, then SIGKILL it: the writes are in
    the WAL only (nothing checkpoints them before the kill)."""
    root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
    data_dir = tmp_path / "data"
    env = server_env(data_dir, root_key, public_keys)
    signer = HostSigningKey.from_pem_file(signing_key)
    store = Acknowledged(data_dir, env, signer)
    with http_server(env) as (process, url):
        async with connect(url, signer, ALICE) as host:
            for n in range(count):
                arguments = demo_capture_arguments(
                    f"Acknowledged write {n}.", f"ack-{n}-{uuid.uuid4().hex}"
                )
                value = capture_value(await host.call(CAPTURE, arguments))
                store.captures.append((arguments, value["candidate_id"]))
        process.kill()
        process.wait(timeout=START_TIMEOUT_S)
    assert store.wal.stat().st_size > 0, "the acknowledged writes must be in the WAL"
    return store


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engram_memory.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        check=False,
    )


def start(store: Acknowledged) -> subprocess.CompletedProcess[str]:
    """`serve --transport http` expected to refuse: it must exit on its own."""
    return _cli(store.env, "serve", "--transport", "http", "--port", "0")


def audit_verify(
    store: Acknowledged, *, own_process: bool = False
) -> subprocess.CompletedProcess[str]:
    """`engram-memory audit verify` with the root key. Through `main(argv)` in this process
    (tests/cli_runner.py) unless `own_process`: the refusals' exit codes (3, 4) are checked
    as a shell sees them, the other verdicts only for their code and output (issue 19)."""
    env = {"PATH": os.environ.get("PATH", ""), "ENGRAM_ROOT_KEY": store.env["ENGRAM_ROOT_KEY"]}
    argv = ("audit", "verify", "--data-dir", str(store.data_dir))
    return _cli(env, *argv) if own_process else run_cli(env, *argv)


def accept_loss(store: Acknowledged, reason: str) -> subprocess.CompletedProcess[str]:
    """`admin accept-loss` through `main(argv)` in this process: code and output checked."""
    return run_cli(
        store.env,
        "admin",
        "--tenant",
        ALICE.tenant,
        "--workspace",
        ALICE.workspace,
        "--operator",
        OPERATOR,
        "accept-loss",
        "--reason",
        reason,
    )


def audit_trail(data_dir: Path) -> list[tuple[str, str, str]]:
    """(tool, outcome, detail) of every audit entry, read from the stopped store."""
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            rows = tx.fetchall("SELECT tool, outcome, detail FROM audit_entries ORDER BY sequence")
    finally:
        database.close()
    return [(str(tool), str(outcome), str(detail)) for tool, outcome, detail in rows]


def store_files(data_dir: Path) -> dict[str, bytes]:
    """The bytes of the store file and its WAL (to prove a refused start wrote nothing)."""
    return {
        path.name: path.read_bytes()
        for path in (data_dir / DATABASE_FILE, data_dir / (DATABASE_FILE + ".wal"))
        if path.exists()
    }


def flip_byte_at(path: Path, offset: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def checkpoint_offline(data_dir: Path) -> None:
    """Fold the WAL into the file with the server stopped, as a clean shutdown would."""
    database = Database.open(data_dir)
    try:
        database.checkpoint()
    finally:
        database.close()


async def serve_one_capture(store: Acknowledged, text: str) -> dict[str, Any]:
    """Start the server again, capture once, stop it; the capture's value."""
    with http_server(store.env) as (_, url):
        async with connect(url, store.signer, ALICE) as host:
            arguments = demo_capture_arguments(text, f"after-{uuid.uuid4().hex}")
            return capture_value(await host.call(CAPTURE, arguments))


@contextmanager
def small_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `mount_point` (root only); the test is skipped with the
    reason when mounting is not permitted here."""
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill_leaving(filler: Path, free_bytes: int) -> None:
    """Fill the file system of `filler` until ENOSPC, then give back `free_bytes`."""
    chunk = b"\0" * (1 << 16)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            try:
                if os.write(fd, chunk) == 0:
                    break
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - free_bytes))
