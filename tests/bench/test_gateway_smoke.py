"""A tiny run of the gateway benchmark, so that it cannot rot.

The harness runs as an operator runs it (a subprocess from the repository root): the real
`engram-memory gateway` over stdio in front of the real `engram-memory serve` and in front
of the floor server, beside both reached directly, in the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"capture", "request_admission", "search", "get", "forget"}

pytestmark = pytest.mark.e2e


def test_a_tiny_run_reports_every_tool_and_the_floor_direct_and_through_the_gateway(
    tmp_path: Path,
) -> None:
    tiny = ["--rounds", "2", "--per-round", "1", "--floor-calls", "5", "--warmup", "0"]
    command = [
        sys.executable,
        "-m",
        "bench.gateway",
        *tiny,
        "--out",
        str(tmp_path),
        "--name",
        "smoke",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "smoke.json").read_text())
    assert {"command", "machine load before", "machine load after"} <= report["meta"].keys()
    results = report["results"]
    for group in ("direct (reference host mints)", "through engram-memory gateway"):
        assert set(results[group]) == TOOLS
        assert all(row["n"] == 2 for row in results[group].values())
    floor = results["floor (do-nothing tool)"]
    assert floor["direct"]["n"] == floor["through the gateway"]["n"] == 10
    assert set(report["added"]) == TOOLS | {"floor_echo"}
    assert all(
        row["added p50 per round min"] <= row["added p50 per round max"]
        for row in report["added"].values()
    )
    assert report["gateway cpu ms per call"]["floor_echo"] >= 0
    markdown = (tmp_path / "smoke.md").read_text()
    assert "python -m bench.gateway" in markdown
    assert "target" in markdown
    assert (tmp_path / "smoke.png").stat().st_size > 0
