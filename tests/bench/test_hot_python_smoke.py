"""`python -m bench.hot_python` runs at its smallest size (its own file beside the entry
points' smokes, so parallel branches adding smokes there do not collide)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.runner import ROOT, run_bench

pytestmark = pytest.mark.e2e


def test_hot_python_tiny_compares_a_tree_with_itself(tmp_path: Path) -> None:
    run_bench(
        "hot_python",
        *("--before", str(ROOT), "--rounds", "2", "--pairs", "1", "--out", str(tmp_path)),
        timeout=900,
    )
    report = json.loads((tmp_path / "hot_python.json").read_text())
    assert (tmp_path / "hot_python.png").stat().st_size > 0
    tools = {"capture", "request_admission", "search", "get", "forget", "withdraw"}
    assert set(report["results"]["CPU per call, after"]) == tools
    profile = report["figures"]["profile of what remains, profiled ms per call by category (after)"]
    assert set(profile) == tools
