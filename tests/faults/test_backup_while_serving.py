"""`admin backup` over the maintenance channel while two MCP clients keep writing.

The real `serve --transport http` process holds the store; two SDK clients capture without
pause while the operator takes four backups from the shell. Every backup must succeed, and
each archive must restore into a store that `audit verify` accepts, that holds every
capture acknowledged before that backup began, and whose live items all open with the keys
the archive carried.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import uuid
from functools import partial
from pathlib import Path

import anyio
import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import connect
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.keys import HostSigningKey
from engram_memory.store.database import Database
from tests.admin.test_rotation_cli import _admin, _cli
from tests.faults.ops_support import ALICE, CAPTURE
from tests.servers import http_server, server_env

pytestmark = pytest.mark.e2e

SCOPE = "tenant:acme/workspace:support"
BACKUPS = 4
WRITERS = 2
ACKS_BETWEEN_BACKUPS = 3


def _backup_process(env: dict[str, str], archive: Path) -> subprocess.CompletedProcess[str]:
    """`admin backup` in a process of its own: it runs while this process's clients write, so
    it must not share their process's environment, streams or umask (tests/cli_runner.py)."""
    who = ["--tenant", "acme", "--workspace", "support", "--operator", "human:dana"]
    command = [sys.executable, "-m", "engram_memory.cli", "admin", *who, "backup"]
    command += ["--out", str(archive)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def _restored_candidates(data_dir: Path) -> set[str]:
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            rows = tx.fetchall("SELECT candidate_id FROM candidates WHERE scope_ref = ?", [SCOPE])
    finally:
        database.close()
    return {str(row[0]) for row in rows}


async def test_backups_taken_while_two_clients_write_all_restore_and_verify(
    tmp_path: Path,
) -> None:
    root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
    env = server_env(tmp_path / "data", root_key, public_keys)
    signer = HostSigningKey.from_pem_file(signing_key)
    acknowledged: list[str] = []
    writer_errors: list[str] = []
    backups: list[tuple[Path, set[str]]] = []
    acks_send, acks_receive = anyio.create_memory_object_stream[str](math.inf)
    with http_server(env) as (_process, url):
        async with anyio.create_task_group() as group:

            async def write(writer: int) -> None:
                async with connect(url, signer, ALICE) as host:
                    for index in range(10_000):
                        text = f"Writer {writer} note {index} {uuid.uuid4().hex}."
                        key = f"backup-{writer}-{uuid.uuid4().hex}"
                        outcome = await host.call(CAPTURE, demo_capture_arguments(text, key))
                        if outcome.envelope["ok"]:
                            candidate_id = outcome.envelope["output"]["value"]["candidate_id"]
                            acknowledged.append(candidate_id)
                            acks_send.send_nowait(candidate_id)
                        else:
                            writer_errors.append(outcome.envelope["error"]["code"])

            for writer in range(WRITERS):
                group.start_soon(write, writer)
            for attempt in range(BACKUPS):
                for _ in range(ACKS_BETWEEN_BACKUPS):  # writes land before each backup
                    with anyio.fail_after(60):
                        await acks_receive.receive()
                before = set(acknowledged)
                archive = tmp_path / f"backup-{attempt}.backup"
                made = await anyio.to_thread.run_sync(partial(_backup_process, env, archive))
                assert made.returncode == 0, (made.stdout, made.stderr)
                assert json.loads(made.stdout)["ok"] is True
                backups.append((archive, before))
            group.cancel_scope.cancel()

    assert writer_errors == []
    root = RootKey.load(root_key)
    for attempt, (archive, before) in enumerate(backups):
        target = tmp_path / f"restored-{attempt}"
        restored = _admin(env, "restore", "--from", str(archive), "--to", str(target))
        assert restored.returncode == 0, (restored.stdout, restored.stderr)
        verified = _cli(env, "audit", "verify", "--data-dir", str(target))
        assert verified.returncode == 0, verified.stderr
        present = _restored_candidates(target)
        assert before <= present  # nothing acknowledged before the backup began is lost
        keys = KeyStore(target / KEYS_DIRECTORY)
        for candidate_id in present:
            assert keys.load_item_key(root, SCOPE, candidate_id) is not None
