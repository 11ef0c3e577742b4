"""Interleaved before/after runs of `bench.hot_path`, side by side: each tool's p50 per run,
the governance floor of each run, and a plot of the p50s.

Usage: .venv/bin/python -m bench.hot_path_pairs DIR [--title TEXT]

DIR holds `before-N/hot_path.json` and `after-N/hot_path.json` (`bench.hot_path --out
DIR/before-1`, ..., run alternately before 1, after 1, before 2, ... so that the machine's
drift falls on both sides). Writes `pairs.json`, `pairs.md` and `pairs.png` into DIR.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from bench.pairs_report import _plot, _table

TOOLS = "in-process tool p50"
FLOOR = "governance components"


def _runs(directory: Path, side: str) -> list[dict[str, Any]]:
    paths = sorted(directory.glob(f"{side}-*/hot_path.json"), key=lambda p: p.parent.name)
    return [json.loads(path.read_text()) for path in paths]


def _sides(before: list[dict[str, Any]], after: list[dict[str, Any]], group: str) -> Any:
    cases = list(before[0]["results"][group])
    rows = {
        case: {
            "before": [float(run["results"][group][case]["p50"]) for run in before],
            "after": [float(run["results"][group][case]["p50"]) for run in after],
        }
        for case in cases
    }
    for sides in rows.values():
        sides["median before"] = [statistics.median(sides["before"])]
        sides["median after"] = [statistics.median(sides["after"])]
    return rows


def write(directory: Path, title: str) -> str:
    before, after = _runs(directory, "before"), _runs(directory, "after")
    if not before or len(before) != len(after):
        raise SystemExit(f"{directory}: expected as many before-N/ as after-N/ runs")
    tools, floor = _sides(before, after, TOOLS), _sides(before, after, FLOOR)
    loads = [
        (b["figures"]["machine load before"], a["figures"]["machine load before"])
        for b, a in zip(before, after, strict=True)
    ]
    summary = {"tools p50": tools, "floor p50": floor, "load": loads}
    (directory / "pairs.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        f"# {title}",
        "",
        "p50 in ms of each in-process tool call (`python -m bench.hot_path --rounds 100`):",
        "",
        *_table(tools, len(before)),
        "",
        "The governance floor measured in the same runs (p50, ms):",
        "",
        *_table(floor, len(before)),
        "",
        "Machine load when each run began:",
        "",
        *(f"- pair {n + 1}: before {b}; after {a}" for n, (b, a) in enumerate(loads)),
    ]
    markdown = "\n".join(lines) + "\n"
    (directory / "pairs.md").write_text(markdown)
    _plot(tools, title, directory / "pairs.png")
    return markdown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory")
    parser.add_argument("--title", default="bench.hot_path, before and after")
    args = parser.parse_args()
    print(write(Path(args.directory), args.title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
