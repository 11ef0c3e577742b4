"""A tiny run of the start-up benchmark, so that it cannot rot.

The harness runs as an operator runs it (a subprocess from the repository root): `--help`,
two command groups' `--help` and `serve` over stdio to its `initialize` answer, beside the
floor (`python -c pass`, `python -c "import mcp"`), in one run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def test_a_tiny_run_reports_the_floor_the_helps_and_the_initialize(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench.startup", "--tiny", "--out", str(tmp_path)]
    subprocess.run(command, cwd=ROOT, capture_output=True, timeout=300, check=True)
    results = json.loads((tmp_path / "startup.json").read_text())["results"]
    assert set(results) == {"floor", "--help", "serve"}
    assert set(results["floor"]) == {"python -c pass", "python -c 'import mcp'"}
    assert set(results["--help"]) == {
        "after: --help",
        "after: serve --help",
        "after: gateway --help",
    }
    assert results["serve"]["after: initialize"]["n"] == 1
    assert (tmp_path / "startup.md").is_file()
    assert (tmp_path / "startup.png").stat().st_size > 0
