"""`python -m bench.hot_python` runs at its smallest size (its own file beside the entry
points' smokes, so parallel branches adding smokes there do not collide)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def test_hot_python_tiny_compares_a_tree_with_itself(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "bench.hot_python",
        "--before",
        str(ROOT),
        "--rounds",
        "2",
        "--pairs",
        "1",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "hot_python.json").read_text())
    assert (tmp_path / "hot_python.png").stat().st_size > 0
    tools = {"capture", "request_admission", "search", "get", "forget", "withdraw"}
    assert set(report["results"]["CPU per call, after"]) == tools
    profile = report["figures"]["profile of what remains, profiled ms per call by category (after)"]
    assert set(profile) == tools
