"""The read-cache benchmarks (issue 20 item 3) run at their smallest size, as an operator runs
them, writing into the test's own directory: `bench.read_profile` on a tiny imported store,
`bench.hot_path_pairs` on two tiny `bench.hot_path` runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.runner import run_bench

pytestmark = pytest.mark.e2e


def test_read_profile_on_a_tiny_store_reads_no_store_on_the_hot_path(tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert json.loads(run_bench("search_store", "--records", "20", "--dir", str(store)))["records"]

    printed = run_bench(
        "read_profile", "--store", str(store), "--calls", "5", "--dump", str(tmp_path)
    )

    assert printed.count("DuckDB statements per call: 0.00, read snapshots per call: 0.00") == 2
    assert (tmp_path / "search.prof").stat().st_size > 0


def test_hot_path_pairs_tiny(tmp_path: Path) -> None:
    tiny = ["--rounds", "2", "--large-records", "1100", "--sustained-seconds", "0.2"]
    for side in ("before-1", "after-1"):
        run_bench("hot_path", *tiny, "--out", str(tmp_path / side))

    run_bench("hot_path_pairs", str(tmp_path))

    pairs = json.loads((tmp_path / "pairs.json").read_text())
    assert set(pairs["tools p50"]) >= {"get", "search"}
    assert (tmp_path / "pairs.png").stat().st_size > 0
