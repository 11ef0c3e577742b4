"""SIGKILL `engram-memory import` mid-run, twice, then run it again to the end.

The real CLI process kills itself at armed failpoints (`ENGRAM_UNSAFE_FAILPOINTS`): once right
after its first batch committed (before the batch's key destructions), once after the next
batch's keys were made durable and before that batch's COMMIT, and once in the middle of a
batch's transaction: every row of the batch written to DuckDB (store/batched_writes.py's
flush), its keys durable, its COMMIT not yet run (`kill_after_staging`). After each crash `audit
verify` passes and only committed batches are in the store; the final run replays the done
lines, loads the rest, and no line is loaded twice.

Every run prepares its lines in its two worker processes (bulk/pool.py, the CLI's default):
a worker must end with the killed import (it watches its parent), or it would keep the
run's stderr open and `_import` would time out instead of returning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.failpoints import (
    ENV_VAR,
    KILL_AFTER_COMMIT,
    KILL_AFTER_KEY_WRITE,
    KILL_AFTER_STAGING,
)
from engram_memory.crypto.keystore import KEY_SUFFIX, KEYS_DIRECTORY
from tests.cli_runner import run_cli
from tests.faults.store_reads import count

pytestmark = pytest.mark.e2e

ADMIT = "engram_memory_request_admission"
SIGKILLED = -9
LINES = 12
BATCH = 4


@dataclass
class Run:
    status: int
    summary: dict[str, Any] | None
    stderr: str


@dataclass
class Runs:
    runs: list[Run] = field(default_factory=list)
    verified: list[int] = field(default_factory=list)  # audit verify exit status per run
    records: list[int] = field(default_factory=list)
    duplicates: int = -1
    key_files: int = -1


def _import(env: dict[str, str], source: Path, failpoint: str | None) -> Run:
    command = [sys.executable, "-m", "engram_memory.cli", "import", "--tenant", "acme"]
    command += ["--workspace", "support", "--principal", "user:alice"]
    command += ["--purpose", "purpose:support-case", "--operator", "human:dana"]
    command += ["--batch", str(BATCH), str(source)]
    run_env = dict(env)
    if failpoint is not None:
        run_env[ENV_VAR] = f"{failpoint}:{ADMIT}"
    done = subprocess.run(
        command, env=run_env, capture_output=True, text=True, timeout=120, check=False
    )
    summary = json.loads(done.stdout)["value"] if done.returncode == 0 else None
    return Run(done.returncode, summary, done.stderr)


def _verify(env: dict[str, str]) -> int:
    """`audit verify`'s exit code, through `main(argv)` in this process (tests/cli_runner.py)."""
    argv = ["--data-dir", env["ENGRAM_DATA_DIR"], "--root-key", env["ENGRAM_ROOT_KEY"]]
    return run_cli(env, "audit", "verify", *argv).returncode


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("import-crash")
    root, _, public = init_host_dir(base / "secrets")
    data = base / "data"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "ENGRAM_DATA_DIR": str(data),
        "ENGRAM_ROOT_KEY": str(root),
        "ENGRAM_HOST_KEYS": str(public),
        # The keys of the batch killed before its COMMIT are orphans; the next start
        # shreds them at once instead of after the usual grace period.
        "ENGRAM_ORPHAN_KEY_GRACE_S": "0",
    }
    source = base / "corpus.jsonl"
    lines = [
        json.dumps(demo_capture_arguments(f"Refund {n} approved.", f"import-crash-{n:04d}"))
        for n in range(LINES)
    ]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    recorded = Runs()
    for failpoint in (KILL_AFTER_COMMIT, KILL_AFTER_KEY_WRITE, KILL_AFTER_STAGING, None):
        recorded.runs.append(_import(env, source, failpoint))
        recorded.verified.append(_verify(env))
        recorded.records.append(count(data, "SELECT count(*) FROM records"))
    recorded.duplicates = count(
        data,
        "SELECT count(*) FROM (SELECT candidate_id FROM records GROUP BY 1 HAVING count(*) > 1)",
    )
    recorded.key_files = sum(1 for _ in (data / KEYS_DIRECTORY).glob(f"*/*{KEY_SUFFIX}"))
    return recorded


def test_the_import_is_killed_after_a_commit_and_before_one(runs: Runs) -> None:
    first, second, third, _ = runs.runs
    assert first.status == SIGKILLED
    assert f"fired: {KILL_AFTER_COMMIT}" in first.stderr
    assert second.status == SIGKILLED
    assert f"fired: {KILL_AFTER_KEY_WRITE}" in second.stderr
    assert third.status == SIGKILLED
    assert f"fired: {KILL_AFTER_STAGING}" in third.stderr
    for run in runs.runs:
        assert "import: 2 worker processes prepare the lines" in run.stderr


def test_audit_verify_passes_after_each_crash_and_after_the_rerun(runs: Runs) -> None:
    assert runs.verified == [0, 0, 0, 0]


def test_only_committed_batches_are_in_the_store_after_a_crash(runs: Runs) -> None:
    # The first run committed one batch; the second and third replayed it and died before
    # their next batch's COMMIT (the third with that batch's rows written to DuckDB).
    assert runs.records == [BATCH, BATCH, BATCH, LINES]


def test_the_rerun_replays_the_done_lines_and_loads_each_line_once(runs: Runs) -> None:
    last = runs.runs[-1]
    assert last.status == 0
    assert last.summary == {"lines": LINES, "replayed": BATCH, "accepted": LINES - BATCH}
    assert runs.duplicates == 0
    # Every accepted record's key, nothing else: ended candidates' and orphaned keys are gone.
    assert runs.key_files == LINES
