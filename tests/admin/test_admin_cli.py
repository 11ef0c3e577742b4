"""`engram-memory admin` from the operator's shell, on a real data directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.database import Database
from engram_memory.tools.dispatch import MemoryService
from tests.cli_runner import run_cli
from tests.harness import SIGNER, Caller, _clock
from tests.tools.test_tool_rules import accepted_record


@pytest.fixture
def prepared(tmp_path: Path, engine: EmbeddedWasmEngine) -> tuple[dict[str, str], str]:
    """A data directory holding one accepted record, written with the operator's root key."""
    root, _, public = init_host_dir(tmp_path / "secrets")
    data = tmp_path / "data"
    database = Database.open(data)
    services = Services(
        database=database,
        keys=KeyStore(data / KEYS_DIRECTORY),
        decider=PolicyDecider(engine, engine.identity, _clock),
        root_key=RootKey.load(root),
        host_keys=HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()}),
        settings=ServiceSettings(host_memory_enabled=True),
    )
    record_id = accepted_record(Caller(MemoryService(services)), "Operator shell test.")
    database.close()
    env = {
        "PATH": "/usr/bin:/bin",
        "ENGRAM_DATA_DIR": str(data),
        "ENGRAM_ROOT_KEY": str(root),
        "ENGRAM_HOST_KEYS": str(public),
    }
    return env, record_id


def _words(operator: str, *argv: str) -> list[str]:
    return ["admin", "--tenant", "acme", "--workspace", "support", "--operator", operator, *argv]


def _admin(env: dict[str, str], operator: str, *argv: str) -> subprocess.CompletedProcess[str]:
    # In this process (issue 19): these tests check the command's code and output only.
    return run_cli(env, *_words(operator, *argv))


def _admin_process(
    env: dict[str, str], operator: str, *argv: str
) -> subprocess.CompletedProcess[str]:
    # A process of its own: DuckDB's file lock only refuses another process.
    command = [sys.executable, "-m", "engram_memory.cli", *_words(operator, *argv)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_operator_disputes_a_record_and_reads_its_history(
    prepared: tuple[dict[str, str], str],
) -> None:
    env, record_id = prepared
    disputed = _admin(env, "human:dana", "dispute", record_id, "--reason", "reason:contested")
    assert disputed.returncode == 0
    assert json.loads(disputed.stdout)["value"]["to_state"] == "accepted_disputed"
    history = _admin(env, "human:erin", "history", record_id)
    assert history.returncode == 0
    operations = [event["operation"] for event in json.loads(history.stdout)["value"]["events"]]
    assert operations == ["capture", "accept", "dispute"]


def test_operator_without_authority_is_refused_with_its_code(
    prepared: tuple[dict[str, str], str],
) -> None:
    env, record_id = prepared
    refused = _admin(env, "human:erin", "dispute", record_id, "--reason", "reason:x")
    assert refused.returncode == 1
    assert json.loads(refused.stdout) == {"ok": False, "code": "UNAUTHORIZED"}


def test_admin_refuses_a_store_held_by_a_running_server(
    prepared: tuple[dict[str, str], str],
) -> None:
    env, record_id = prepared
    holder = Database.open(Path(env["ENGRAM_DATA_DIR"]))
    try:
        busy = _admin_process(env, "human:dana", "history", record_id)
    finally:
        holder.close()
    assert busy.returncode == 2
    assert len(busy.stderr.strip().splitlines()) == 1
