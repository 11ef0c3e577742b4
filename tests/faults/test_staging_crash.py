"""SIGKILL the real server between an admission's staging of its index rows and its accept
transaction: the staged rows are left behind; the next start sweeps them before serving, and
the retried admission indexes the record exactly once."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.failpoints import KILL_AFTER_STAGING
from engram_memory.core.indexing import STAGE_FROM_POSTINGS
from tests.faults.keys_support import ADMIT, ALICE, CAPTURE, Secrets, candidate_id, server_life
from tests.faults.store_reads import count

pytestmark = pytest.mark.e2e

SIGKILLED = -9
ORPHANS = (
    "SELECT count(*) FROM lexical_documents d WHERE NOT EXISTS (SELECT 1 FROM records r"
    " WHERE r.scope_ref = d.scope_ref AND r.record_id = d.record_id)"
)
DOUBLES = (
    "SELECT count(*) FROM (SELECT scope_ref, record_id, term_hash, field FROM lexical_postings"
    " GROUP BY ALL HAVING count(*) > 1)"
)


@dataclass
class Runs:
    status: int = 0
    fired: bool = False
    orphans_after_crash: int = -1
    orphans_after_restart: int = -1
    retry: dict[str, Any] = field(default_factory=dict)
    search: dict[str, Any] = field(default_factory=dict)
    postings: int = -1
    doubles: int = -1


async def _run(data_dir: Path, secrets: Secrets, runs: Runs) -> None:
    word = f"zq{uuid.uuid4().hex[:12]}"
    # Enough distinct terms that the admission stages its index (indexing.STAGE_FROM_POSTINGS).
    filler = " ".join(f"t{n:05d}" for n in range(STAGE_FROM_POSTINGS + 500))
    text = f"Refund {word} approved for order 4711. {filler}"
    capture = demo_capture_arguments(text, "capture-" + word)
    admit = {"candidate_id": candidate_id(capture["idempotency_key"]), "idempotency_key": word * 2}
    async with server_life(data_dir, secrets, f"{KILL_AFTER_STAGING}:{ADMIT}") as life:
        assert (await life.call(CAPTURE, capture))["ok"] is True
        runs.status = await life.call_until_killed(ADMIT, admit)
        runs.fired = any(f"fired: {KILL_AFTER_STAGING}".encode() in line for line in life.log)
    runs.orphans_after_crash = count(data_dir, ORPHANS)
    async with server_life(data_dir, secrets):
        pass  # started (and swept) only
    runs.orphans_after_restart = count(data_dir, ORPHANS)
    async with server_life(data_dir, secrets) as life:
        runs.retry = await life.call(ADMIT, admit)
        runs.search = await life.call(
            "engram_memory_search", {"query": word, "purpose_ref": ALICE.purpose_ref}
        )
    runs.postings = count(data_dir, "SELECT count(*) FROM lexical_postings")
    runs.doubles = count(data_dir, DOUBLES)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("staging-crash")
    secrets = Secrets(*init_host_dir(base / "secrets"))
    recorded = Runs()
    asyncio.run(_run(base / "data", secrets, recorded))
    return recorded


def test_a_crash_after_staging_leaves_rows_the_next_start_sweeps(runs: Runs) -> None:
    assert runs.status == SIGKILLED
    assert runs.fired
    assert runs.orphans_after_crash == 1
    assert runs.orphans_after_restart == 0


def test_the_retried_admission_indexes_the_record_once(runs: Runs) -> None:
    assert runs.retry["ok"] is True, runs.retry
    assert runs.retry["output"]["value"]["outcome"]["status"] == "accepted"
    record_id = runs.retry["output"]["value"]["outcome"]["record_id"]
    assert runs.search["ok"] is True, runs.search
    found = [p["record"]["record_id"] for p in runs.search["output"]["value"]["records"]]
    assert found == [record_id]
    assert runs.postings > 0
    assert runs.doubles == 0
