"""Interleaved before/after runs of `bench.store_floor`, side by side: a Markdown table of each
tool's p50 per run, the floor of each run, and a plot of the p50s.

Usage: .venv/bin/python -m bench.pairs_report DIR [--title TEXT]

DIR holds `before-N.json` and `after-N.json` (each a `store_floor.json`, run alternately
before 1, after 1, before 2, ... so that the machine's drift falls on both sides). Writes
`pairs.json`, `pairs.md` and `pairs.png` into DIR.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

FLOOR = (
    ("store engine", "SELECT 1 on a read snapshot"),
    ("store engine", "one-row INSERT inside a transaction"),
    ("store engine", "BEGIN + one-row INSERT + COMMIT (WAL fsync)"),
    ("disk and policy", "item key file written + fsync"),
    ("disk and policy", "head anchor slot written + fdatasync"),
)


def _runs(directory: Path, side: str) -> list[dict[str, Any]]:
    paths = sorted(directory.glob(f"{side}-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    return [json.loads(path.read_text()) for path in paths]


def _p50s(run: dict[str, Any]) -> dict[str, float]:
    return {tool: float(s["p50"]) for tool, s in run["results"]["tools p50"].items()}


def summarize(directory: Path) -> dict[str, Any]:
    before, after = _runs(directory, "before"), _runs(directory, "after")
    if not before or len(before) != len(after):
        raise SystemExit(f"{directory}: expected as many before-N.json as after-N.json")
    tools = list(_p50s(before[0]))
    per_tool = {
        tool: {
            "before": [_p50s(run)[tool] for run in before],
            "after": [_p50s(run)[tool] for run in after],
        }
        for tool in tools
    }
    for sides in per_tool.values():
        sides["median before"] = [statistics.median(sides["before"])]
        sides["median after"] = [statistics.median(sides["after"])]
    floor = {
        f"{case}": {
            "before": [run["results"][group][case]["p50"] for run in before],
            "after": [run["results"][group][case]["p50"] for run in after],
        }
        for group, case in FLOOR
    }
    loads = {
        "before": [run["figures"].get("machine load before", "") for run in before],
        "after": [run["figures"].get("machine load before", "") for run in after],
    }
    per_call = {
        "before": before[0]["figures"].get("per call: where the time goes (means)", {}),
        "after": after[0]["figures"].get("per call: where the time goes (means)", {}),
    }
    return {"tools p50": per_tool, "floor p50": floor, "load": loads, "per call (run 1)": per_call}


def _table(rows: dict[str, dict[str, list[float]]], pairs: int) -> list[str]:
    header = ["case"]
    for n in range(1, pairs + 1):
        header += [f"before {n}", f"after {n}"]
    header += ["median before", "median after"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for case, sides in rows.items():
        cells = [case]
        for n in range(pairs):
            cells += [f"{sides['before'][n]:.1f}", f"{sides['after'][n]:.1f}"]
        if "median before" in sides:
            cells += [f"{sides['median before'][0]:.1f}", f"**{sides['median after'][0]:.1f}**"]
        else:
            cells += [
                f"{statistics.median(sides['before']):.2f}",
                f"{statistics.median(sides['after']):.2f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write(directory: Path, title: str) -> str:
    summary = summarize(directory)
    pairs = len(summary["load"]["before"])
    (directory / "pairs.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        f"# {title}",
        "",
        "p50 in ms of each in-process tool call (`bench.store_floor`, 100 rounds a run):",
        "",
        *_table(summary["tools p50"], pairs),
        "",
        "The floor measured in the same runs (p50, ms):",
        "",
        *_table(summary["floor p50"], pairs),
        "",
        "Machine load when each run began:",
        "",
        *(
            f"- pair {n + 1}: before {b}; after {a}"
            for n, (b, a) in enumerate(
                zip(summary["load"]["before"], summary["load"]["after"], strict=True)
            )
        ),
    ]
    markdown = "\n".join(lines) + "\n"
    (directory / "pairs.md").write_text(markdown)
    _plot(summary["tools p50"], title, directory / "pairs.png")
    return markdown


def _plot(per_tool: dict[str, dict[str, list[float]]], title: str, target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tools = list(per_tool)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.38
    sides = ((-width / 2, "before", "#9aa5b1"), (width / 2, "after", "#2f6f9f"))
    for offset, side, colour in sides:
        xs = [i + offset for i in range(len(tools))]
        medians = [per_tool[tool][f"median {side}"][0] for tool in tools]
        ax.bar(xs, medians, width, label=f"{side} (median of the runs)", color=colour)
        for x, tool in zip(xs, tools, strict=True):
            runs = per_tool[tool][side]
            ax.plot([x] * len(runs), runs, "k.", markersize=4)
    ax.set_xticks(range(len(tools)), tools, rotation=20, ha="right")
    ax.set_ylabel("p50 latency (ms); dots: each run")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(target, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directory", type=Path)
    parser.add_argument("--title", default="store_floor: before and after, interleaved runs")
    args = parser.parse_args()
    print(write(args.directory, args.title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
