"""Several trees measured in one sitting, side by side: `bench.tools_stdio` and
`bench.http_concurrency` runs of each tree, interleaved run by run.

Usage: .venv/bin/python -m bench.trees_report DIR [--title TEXT]

DIR holds `stdio/<tree>-N/tools_stdio.json` and `http/<tree>-N/http_concurrency.json`,
each run from that tree's own checkout and venv (the server a bench starts gets a clean
environment, so a PYTHONPATH pointing at another tree does not reach it). Writes
`trees.md` and `trees.png` into DIR: each tool's p50 over stdio per tree (median of its
runs, every run listed), the stdio floor, and the HTTP calls/s, p50 and p99 with the floor.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

STDIO_GROUP = "stdio, embedded engine"
STDIO_FLOOR = ("stdio floor (do-nothing tool)", "floor_echo")


def _runs(directory: Path, name: str) -> dict[str, list[dict[str, Any]]]:
    """{tree: [run, ...]} from `directory/<tree>-N/<name>`, runs in their number's order."""
    by_tree: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for path in directory.glob(f"*-*/{name}"):
        tree, _, number = path.parent.name.rpartition("-")
        by_tree.setdefault(tree, []).append((int(number), json.loads(path.read_text())))
    return {tree: [run for _, run in sorted(runs)] for tree, runs in sorted(by_tree.items())}


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def _stdio_rows(stdio: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, list[float]]]:
    """{case: {tree: [p50 of each run]}}, the floor last."""
    rows: dict[str, dict[str, list[float]]] = {}
    for tree, runs in stdio.items():
        for run in runs:
            for case, stats in run["results"][STDIO_GROUP].items():
                rows.setdefault(case, {}).setdefault(tree, []).append(float(stats["p50"]))
            floor = run["results"][STDIO_FLOOR[0]][STDIO_FLOOR[1]]["p50"]
            rows.setdefault("floor (do-nothing tool)", {}).setdefault(tree, []).append(floor)
    return rows


def write(directory: Path, title: str) -> str:
    stdio, http = (
        _runs(directory / "stdio", "tools_stdio.json"),
        _runs(directory / "http", "http_concurrency.json"),
    )
    trees = sorted(set(stdio) | set(http))
    lines = [f"# {title}", ""]
    rows = _stdio_rows(stdio)
    if rows:
        lines += [
            "p50 in ms over stdio (`python -m bench.tools_stdio --rounds 100`), median of each",
            "tree's runs, then every run:",
            "",
            "| case | " + " | ".join(trees) + " |",
            "|---|" + "---|" * len(trees),
        ]
        for case, per_tree in rows.items():
            cells = [
                f"**{_median(per_tree[t])}** ({', '.join(f'{v:.1f}' for v in per_tree[t])})"
                if t in per_tree
                else "-"
                for t in trees
            ]
            lines.append(f"| {case} | " + " | ".join(cells) + " |")
        lines.append("")
    if http:
        lines += [
            "Streamable HTTP, 16 clients (`python -m bench.http_concurrency --clients 16",
            "--seconds 20`), every run:",
            "",
            "| tree, run | calls/s | p50 ms | p99 ms | errors | floor calls/s | floor p99 ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for tree, runs in http.items():
            for number, run in enumerate(runs, 1):
                engram, floor = run["figures"]["engram"], run["figures"]["floor"]
                lines.append(
                    f"| {tree} {number} | {engram['calls/s']} | {engram['p50 ms']} | "
                    f"{engram['p99 ms']} | {engram['errors']} | {floor['calls/s']} | "
                    f"{floor['p99 ms']} |"
                )
        lines.append("")
    (directory / "trees.md").write_text("\n".join(lines), encoding="utf-8")
    _plot(rows, http, trees, title, directory / "trees.png")
    return "\n".join(lines)


def _plot(
    rows: dict[str, dict[str, list[float]]],
    http: dict[str, list[dict[str, Any]]],
    trees: list[str],
    title: str,
    target: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), width_ratios=(3, 1))
    cases = list(rows)
    width = 0.8 / max(1, len(trees))
    for index, tree in enumerate(trees):
        xs = [i - 0.4 + width * (index + 0.5) for i in range(len(cases))]
        medians = [_median(rows[case].get(tree, [0.0])) for case in cases]
        left.bar(xs, medians, width, label=tree)
        for x, case in zip(xs, cases, strict=True):
            runs = rows[case].get(tree, [])
            left.plot([x] * len(runs), runs, "k.", markersize=4)
    left.set_xticks(range(len(cases)), cases, rotation=20, ha="right")
    left.set_ylabel("p50 over stdio (ms); dots: each run")
    left.grid(axis="y", alpha=0.3)
    left.legend()
    for index, tree in enumerate(trees):
        rates = [float(run["figures"]["engram"]["calls/s"]) for run in http.get(tree, [])]
        right.bar(index, statistics.median(rates) if rates else 0.0, 0.6)
        right.plot([index] * len(rates), rates, "k.", markersize=5)
    right.set_xticks(range(len(trees)), trees, rotation=20, ha="right")
    right.set_ylabel("HTTP calls/s, 16 clients; dots: each run")
    right.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(target, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--title", default="Trees side by side, one sitting")
    args = parser.parse_args()
    print(write(args.directory, args.title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
