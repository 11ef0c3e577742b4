"""`engram-memory import` from the operator's shell: refusals of the whole run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engram_memory.admin.host_setup import CHECKPOINT_KEY_FILE, init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.store.database import Database
from tests.cli_runner import run_cli


@pytest.fixture
def setup(tmp_path: Path) -> tuple[dict[str, str], Path]:
    root, _, public = init_host_dir(tmp_path / "secrets")
    env = {
        "PATH": "/usr/bin:/bin",
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "ENGRAM_ROOT_KEY": str(root),
        "ENGRAM_HOST_KEYS": str(public),
    }
    source = tmp_path / "corpus.jsonl"
    line = demo_capture_arguments("Refund approved.", "import-cli-line-0001")
    source.write_text(json.dumps(line) + "\n", encoding="utf-8")
    return env, source


def _words(source: Path, operator: str, *extra: str) -> list[str]:
    words = ["import", "--tenant", "acme", "--workspace", "support", "--principal", "user:alice"]
    return [
        *words,
        "--purpose",
        "purpose:support-case",
        "--operator",
        operator,
        *extra,
        str(source),
    ]


def _import(
    env: dict[str, str], source: Path, operator: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    # In this process (issue 19): these tests check the run's code, output and audit only.
    return run_cli(env, *_words(source, operator, *extra))


def _import_process(
    env: dict[str, str], source: Path, operator: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    # A process of its own: DuckDB's file lock only refuses another process.
    command = [sys.executable, "-m", "engram_memory.cli", *_words(source, operator, *extra)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def _audit_entries(data_dir: Path) -> list[tuple[str, str, str]]:
    """(tool, outcome, session_ref) of every audit entry, in order."""
    database = Database.open(data_dir, read_only=True)
    try:
        with database.reading() as tx:
            rows = tx.fetchall(
                "SELECT tool, outcome, session_ref FROM audit_entries ORDER BY sequence"
            )
    finally:
        database.close(checkpoint=False)
    return [(str(tool), str(outcome), str(session)) for tool, outcome, session in rows]


def _audit_outcomes(data_dir: Path) -> list[tuple[str, str]]:
    return [(tool, outcome) for tool, outcome, _ in _audit_entries(data_dir)]


def test_an_operator_without_maintain_authority_is_refused_and_audited(
    setup: tuple[dict[str, str], Path],
) -> None:
    env, source = setup
    refused = _import(env, source, "human:erin")
    assert refused.returncode == 1
    assert json.loads(refused.stdout) == {"ok": False, "code": "UNAUTHORIZED"}
    assert _audit_outcomes(Path(env["ENGRAM_DATA_DIR"])) == [("admin:import", "UNAUTHORIZED")]


def test_a_store_held_by_another_process_is_refused_in_one_line(
    setup: tuple[dict[str, str], Path],
) -> None:
    env, source = setup
    holder = Database.open(Path(env["ENGRAM_DATA_DIR"]))
    try:
        busy = _import_process(env, source, "human:dana")
    finally:
        holder.close()
    assert busy.returncode == 2
    assert len(busy.stderr.strip().splitlines()) == 1


def test_a_batch_below_one_is_a_configuration_error(setup: tuple[dict[str, str], Path]) -> None:
    env, source = setup
    refused = _import(env, source, "human:dana", "--batch", "0")
    assert refused.returncode == 2
    assert not Path(env["ENGRAM_DATA_DIR"]).exists()


def test_an_import_prints_its_counts_and_reports_progress(
    setup: tuple[dict[str, str], Path],
) -> None:
    env, source = setup
    done = _import(env, source, "human:dana")
    assert done.returncode == 0
    assert json.loads(done.stdout)["value"] == {"lines": 1, "accepted": 1}
    assert "lines/s" in done.stderr
    outcomes = _audit_outcomes(Path(env["ENGRAM_DATA_DIR"]))
    assert outcomes == [
        ("engram_memory_capture", "ok"),
        ("engram_memory_request_admission", "ok"),
        ("admin:import", "ok"),
    ]


def test_the_lines_entries_carry_the_session_of_the_runs_entry(
    setup: tuple[dict[str, str], Path],
) -> None:
    env, source = setup
    assert _import(env, source, "human:dana").returncode == 0
    sessions = {session for _, _, session in _audit_entries(Path(env["ENGRAM_DATA_DIR"]))}
    assert len(sessions) == 1


def test_with_a_checkpoint_key_the_run_ends_with_a_signed_checkpoint_of_its_heads(
    setup: tuple[dict[str, str], Path],
) -> None:
    """The next start verifies the audit trail from there (core/startup_audit.py)."""
    env, source = setup
    key = Path(env["ENGRAM_ROOT_KEY"]).parent / CHECKPOINT_KEY_FILE
    assert _import(env, source, "human:dana").returncode == 0
    assert _checkpoints(Path(env["ENGRAM_DATA_DIR"])) == []  # none without the key
    rerun = {**env, "ENGRAM_CHECKPOINT_KEY": str(key)}
    assert _import(rerun, source, "human:dana").returncode == 0
    data = Path(env["ENGRAM_DATA_DIR"])
    [(reason, sequence)] = _checkpoints(data)
    assert reason == "import"
    assert sequence == len(_audit_entries(data))  # the head the run left: its own entry


def _checkpoints(data_dir: Path) -> list[tuple[str, int]]:
    database = Database.open(data_dir, read_only=True)
    try:
        with database.reading() as tx:
            rows = tx.fetchall("SELECT reason, audit_sequence FROM audit_checkpoints")
    finally:
        database.close(checkpoint=False)
    return [(str(reason), int(sequence)) for reason, sequence in rows]
