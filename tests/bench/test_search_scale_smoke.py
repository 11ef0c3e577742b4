"""A 200-record run of the search-at-scale harness, so that the benchmark cannot rot.

The harness runs as an operator runs it (a subprocess from the repository root) against the
real `engram-memory import`, a real `serve` process over stdio, the stdio floor and the MCP
reference memory server, which `scripts/lib.sh`'s `ensure_reference_memory_server` installs
before pytest (scripts/test calls it): nothing is installed during the test, and a missing
server fails it with the harness's reason (never a skip). Basic Memory is left out: indexing
1k notes takes it minutes; the full runs (bench/README.md, docs/benchmarks) include it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 200  # every path of a full run (import, both transports, ratios, report), briefly
QUERIES = 10  # two of them no-hit queries (bench/corpus.py: every fifth)

pytestmark = pytest.mark.e2e


def test_a_small_run_reports_engram_the_floor_and_the_reference_server_for_every_query(
    tmp_path: Path,
) -> None:
    print("Basic Memory not in the smoke: its indexing takes minutes (full runs only)")
    command = [sys.executable, "-m", "bench.search_scale", "--sizes", str(RECORDS),
               "--queries", str(QUERIES), "--gets", "5", "--systems", "engram,reference",
               "--out", str(tmp_path), "--name", "smoke"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "smoke.json").read_text())
    assert {"command", "machine load before", "machine load after"} <= report["meta"].keys()
    size = report["sizes"][str(RECORDS)]
    systems = size["systems"]
    for measure in ("search in-process", "search stdio"):
        assert systems["engram"][measure]["n"] == QUERIES
    assert systems["engram"]["get in-process"]["n"] > 0
    assert systems["engram"]["loading"]["outcomes"].get("accepted") == RECORDS
    # Some queries find records, and the no-hit ones find none: the corpus and queries agree.
    assert 0 < systems["engram"]["queries with a hit"] < QUERIES
    assert systems["engram"]["rss MiB"] > 0
    assert systems["engram"]["data bytes per record"] > 0
    assert systems["floor"]["search stdio"]["n"] == QUERIES
    assert "reference" not in size["skipped"], size["skipped"]["reference"]
    assert systems["reference"]["search stdio"]["n"] == QUERIES
    assert set(size["ratios"]["reference"]) == {"p50", "p99"}
    for suffix in ("md", "png"):
        assert (tmp_path / f"smoke.{suffix}").stat().st_size > 0
