"""`bench.trees_report` reads each tree's stdio and HTTP runs and reports every one of them,
as an operator runs it (on a copy of the committed third-batch runs, writing beside the copy)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.bench.runner import ROOT, run_bench

RUNS = ROOT / "bench" / "results" / "calllog" / "phase3"


def test_every_tree_and_run_is_reported_with_its_plot(tmp_path: Path) -> None:
    for kind in ("stdio", "http"):
        shutil.copytree(RUNS / kind, tmp_path / kind)
    run_bench("trees_report", str(tmp_path), "--title", "t", timeout=120)
    report = (tmp_path / "trees.md").read_text()
    assert (tmp_path / "trees.png").stat().st_size > 0
    header = next(line for line in report.splitlines() if line.startswith("| case |"))
    assert header == "| case | 2501c6e | 9a40dd2 | capture-log |"
    http_rows = [line for line in report.splitlines() if line.startswith("| 2501c6e ")]
    assert [row.split("|")[1].strip() for row in http_rows] == ["2501c6e 1", "2501c6e 2"]
    for case in ("capture", "request_admission", "search", "get", "forget", "withdraw"):
        assert any(line.startswith(f"| {case} |") for line in report.splitlines())
