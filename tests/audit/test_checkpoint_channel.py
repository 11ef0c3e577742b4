"""Checkpoints from a running service: `audit checkpoint` over the maintenance channel while a
real `serve` process holds the store, then verified by an auditor once it stopped; and a
configured checkpoint key that cannot be used stops the service from starting.

The auditor's commands run in this process (`_cli` is tests/cli_runner.run_cli, issue 19): the
store is held by the `serve` process, so they still reach it over the maintenance channel."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from engram_memory.admin.host_setup import CHECKPOINT_KEY_FILE, CHECKPOINT_PUBLIC_FILE
from engram_memory.core.checkpoints import verify_signature
from engram_memory.crypto.checkpoint_key import CheckpointPublicKey
from engram_memory.store import checkpoints as rows
from engram_memory.store.database import Database
from tests.admin.test_rotation_cli import _cli
from tests.admin.test_rotation_cli import prepared as prepared  # the same prepared store
from tests.servers import http_server

WHO = ("--tenant", "acme", "--workspace", "support", "--operator", "human:dana")


def _serving_env(prepared: tuple[dict[str, str], list[str]]) -> tuple[dict[str, str], Path]:
    env, _ = prepared
    secrets = Path(env["ENGRAM_ROOT_KEY"]).parent
    return {
        **env,
        "ENGRAM_MEMORY_ENABLED": "true",
        "ENGRAM_POLICY": "embedded",
        "ENGRAM_CHECKPOINT_KEY": str(secrets / CHECKPOINT_KEY_FILE),
    }, secrets


def test_an_auditor_asks_a_running_service_for_a_checkpoint_and_verifies_the_store_later(
    prepared: tuple[dict[str, str], list[str]], tmp_path: Path
) -> None:
    env, secrets = _serving_env(prepared)
    public = secrets / CHECKPOINT_PUBLIC_FILE
    assert stat.S_IMODE((secrets / CHECKPOINT_KEY_FILE).stat().st_mode) == 0o600  # host init
    out = tmp_path / "kept.json"
    with http_server(env):
        asked = _cli(env, "audit", "checkpoint", "--out", str(out), *WHO)
        assert asked.returncode == 0, asked.stdout + asked.stderr
    value = json.loads(asked.stdout)["value"]
    assert value["audit_sequence"] > 0
    key = CheckpointPublicKey.from_pem_file(public)
    verify_signature(json.loads(out.read_text()), key)  # signed by the service's key

    printed = _cli(env, "audit", "checkpoint-key", "--key", str(public))
    assert printed.returncode == 0
    assert f"key_id: {key.key_id}" in printed.stdout.splitlines()

    verified = _cli(
        env,
        "audit",
        "verify",
        "--data-dir",
        env["ENGRAM_DATA_DIR"],
        "--checkpoint",
        str(out),
        "--checkpoint-public-key",
        str(public),
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    database = Database.open(Path(env["ENGRAM_DATA_DIR"]), read_only=True)
    try:
        with database.transaction() as tx:
            kept = rows.stored_documents(tx)
    finally:
        database.close()
    assert json.loads(out.read_text()) in [json.loads(text) for text in kept]


def test_a_configured_checkpoint_key_others_can_read_stops_the_service_from_starting(
    prepared: tuple[dict[str, str], list[str]],
) -> None:
    env, secrets = _serving_env(prepared)
    os.chmod(secrets / CHECKPOINT_KEY_FILE, 0o644)
    # A process of its own: the exit status `serve` gives the shell (or a desktop client).
    command = [sys.executable, "-m", "engram_memory.cli", "serve"]
    started = subprocess.run(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 2, started.stderr


def test_a_running_service_signs_the_exports_it_makes_and_compares_a_kept_checkpoint(
    prepared: tuple[dict[str, str], list[str]], tmp_path: Path
) -> None:
    env, secrets = _serving_env(prepared)
    public = str(secrets / CHECKPOINT_PUBLIC_FILE)
    data_dir = env["ENGRAM_DATA_DIR"]
    kept, export = tmp_path / "kept.json", tmp_path / "export"
    forged = tmp_path / "forged.json"
    with http_server(env):
        assert _cli(env, "audit", "checkpoint", "--out", str(kept), *WHO).returncode == 0
        exported = _cli(env, "audit", "export", "--data-dir", data_dir, "--out", str(export), *WHO)
        assert exported.returncode == 0, exported.stdout + exported.stderr
        manifest = json.loads((export / "manifest.json").read_text())
        checked = _cli(
            env, "audit", "verify-manifest", str(export), "--checkpoint-public-key", public
        )
        compare = ("--checkpoint", str(kept), "--checkpoint-public-key", public)
        extends = _cli(env, "audit", "verify", "--data-dir", data_dir, *WHO, *compare)
        document = json.loads(kept.read_text())
        document["audit_head"]["sequence"] += 1  # a checkpoint the service never signed
        forged.write_text(json.dumps(document))
        untrusted = _cli(
            env, "audit", "verify", "--data-dir", data_dir, *WHO,
            "--checkpoint", str(forged), "--checkpoint-public-key", public,
        )  # fmt: skip
    assert manifest["signature"] is not None
    assert manifest["exported_at"]
    assert checked.returncode == 0, checked.stdout
    assert extends.returncode == 0, extends.stdout + extends.stderr
    assert untrusted.returncode == 5, untrusted.stdout
    database = Database.open(Path(data_dir), read_only=True)
    try:
        with database.transaction() as tx:
            stored = [json.loads(text) for text in rows.stored_documents(tx)]
    finally:
        database.close()
    # The export's checkpoint (same heads as its manifest) is kept like every other one.
    assert json.loads((export / "checkpoint.json").read_text()) in stored
