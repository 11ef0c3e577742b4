"""`engram-memory admin rotate-scope-key | rotate-root-key` and `host new-root-key` from the
operator's shell, on a real data directory."""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.crypto import keyfile
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.database import Database
from engram_memory.tools.dispatch import MemoryService
from tests.cli_runner import run_cli
from tests.harness import SIGNER, Caller, _clock
from tests.tools.test_tool_rules import accepted_record, code, value


@contextmanager
def _service(data: Path, root: Path, engine: EmbeddedWasmEngine) -> Iterator[Caller]:
    database = Database.open(data)
    try:
        yield Caller(
            MemoryService(
                Services(
                    database=database,
                    keys=KeyStore(data / KEYS_DIRECTORY),
                    decider=PolicyDecider(engine, engine.identity, _clock),
                    root_key=RootKey.load(root),
                    host_keys=HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()}),
                    settings=ServiceSettings(host_memory_enabled=True),
                )
            )
        )
    finally:
        database.close()


@pytest.fixture
def prepared(tmp_path: Path, engine: EmbeddedWasmEngine) -> tuple[dict[str, str], list[str]]:
    root, _, public = init_host_dir(tmp_path / "secrets")
    data = tmp_path / "data"
    with _service(data, root, engine) as caller:
        records = [accepted_record(caller, f"Rotated from the shell {i}.") for i in range(3)]
    env = {
        "PATH": "/usr/bin:/bin",
        "ENGRAM_DATA_DIR": str(data),
        "ENGRAM_ROOT_KEY": str(root),
        "ENGRAM_HOST_KEYS": str(public),
    }
    return env, records


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    # In this process (issue 19): the tests here and in test_backup_cli.py check codes, output
    # and files only; main() sets the private umask for these commands as a process would.
    return run_cli(env, *argv)


def _admin(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    who = ["--tenant", "acme", "--workspace", "support", "--operator", "human:dana"]
    return _cli(env, "admin", *who, *argv)


def _get(caller: Caller, record_id: str) -> dict[str, object]:
    return caller.call(
        "engram_memory_get", {"record_id": record_id, "purpose_ref": caller.purpose_ref}
    )


def test_operator_rotates_the_scope_key_then_the_root_key(
    prepared: tuple[dict[str, str], list[str]], engine: EmbeddedWasmEngine, tmp_path: Path
) -> None:
    env, records = prepared
    data, old_root = Path(env["ENGRAM_DATA_DIR"]), Path(env["ENGRAM_ROOT_KEY"])

    scope = _admin(env, "rotate-scope-key")
    assert scope.returncode == 0, scope.stderr
    assert json.loads(scope.stdout)["value"]["epoch"] == 1
    assert "key files 3/3" in scope.stderr  # progress

    new_root = tmp_path / "secrets" / "root-2.key"
    created = _cli(env, "host", "new-root-key", "--current", str(old_root), "--out", str(new_root))
    assert created.returncode == 0, created.stderr
    assert stat.S_IMODE(new_root.stat().st_mode) == 0o600
    rotated = _admin(env, "rotate-root-key", "--new-root-key", str(new_root))
    assert rotated.returncode == 0, rotated.stderr
    result = json.loads(rotated.stdout)["value"]
    assert (result["complete"], result["rewrapped"]) == (True, 3)

    new_id = RootKey.load(new_root).key_id
    for key_file in (data / KEYS_DIRECTORY).rglob("*.key"):
        assert keyfile.read_header(key_file.read_bytes()).root_id == new_id
    retired = tmp_path / "secrets" / "root-3.key"
    dropped = _cli(
        env,
        "host",
        "new-root-key",
        "--current",
        str(new_root),
        "--out",
        str(retired),
        "--drop-previous",
    )
    assert dropped.returncode == 0
    with _service(data, retired, engine) as caller:  # the old root is no longer needed
        for record_id in records:
            assert value(_get(caller, record_id))
        found = caller.call(
            "engram_memory_search", {"query": "shell", "purpose_ref": caller.purpose_ref}
        )
        assert len(value(found)["records"]) == 3  # the blind index still matches
    with _service(data, old_root, engine) as caller:  # nor does it open anything any more
        assert code(_get(caller, records[0])) == "BLOB_MISSING"


def test_a_new_root_key_file_without_the_stores_root_is_a_configuration_error(
    prepared: tuple[dict[str, str], list[str]], tmp_path: Path
) -> None:
    env, _ = prepared
    unrelated, _, _ = init_host_dir(tmp_path / "other-secrets")
    refused = _admin(env, "rotate-root-key", "--new-root-key", str(unrelated))
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_reader_may_not_rotate(prepared: tuple[dict[str, str], list[str]]) -> None:
    env, _ = prepared
    who = ["--tenant", "acme", "--workspace", "support", "--operator", "human:erin"]
    refused = _cli(env, "admin", *who, "rotate-scope-key")
    assert refused.returncode == 1
    assert json.loads(refused.stdout) == {"ok": False, "code": "UNAUTHORIZED"}
