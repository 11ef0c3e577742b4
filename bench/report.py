"""Shared by the benchmarks: percentiles, and results written as JSON, Markdown and a plot."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def machine() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"),
    }


def machine_load() -> str:
    """`uptime`'s load averages: other work on the machine skews every figure."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def write_report(
    name: str,
    title: str,
    command: str,
    series: Mapping[str, Mapping[str, Sequence[float]]],
    unit: str,
    out: Path = RESULTS,
    extra: Mapping[str, object] | None = None,
) -> str:
    """Write `<name>.json|.md|.png` for `series[group][label] = samples`; return the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    meta = machine()
    summary = {
        group: {
            label: {
                "n": len(samples),
                "p50": round(percentile(samples, 0.5), 3),
                "p90": round(percentile(samples, 0.9), 3),
                "p99": round(percentile(samples, 0.99), 3),
            }
            for label, samples in rows.items()
        }
        for group, rows in series.items()
    }
    (out / f"{name}.json").write_text(
        json.dumps(
            {
                "meta": {**meta, "command": command, "unit": unit},
                "results": summary,
                "figures": dict(extra or {}),
            },
            indent=2,
        )
        + "\n"
    )
    lines = [
        f"# {title}",
        "",
        f"`{command}` on {meta['machine']}, Python {meta['python']}, {meta['date']}.",
        "",
        f"| group | case | n | p50 {unit} | p90 {unit} | p99 {unit} |",
        "|---|---|---|---|---|---|",
    ]
    for group, rows in summary.items():
        for label, s in rows.items():
            lines.append(f"| {group} | {label} | {s['n']} | {s['p50']} | {s['p90']} | {s['p99']} |")
    if extra:
        lines += ["", *(f"- {name}: {value}" for name, value in extra.items())]
    markdown = "\n".join(lines) + "\n"
    (out / f"{name}.md").write_text(markdown)
    box_plot(series, title, unit, out / f"{name}.png")
    return markdown


def box_plot(
    series: Mapping[str, Mapping[str, Sequence[float]]], title: str, unit: str, target: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(series)
    fig, axes = plt.subplots(1, len(groups), figsize=(5 + 4 * len(groups), 4.5), squeeze=False)
    for ax, group in zip(axes[0], groups, strict=True):
        labels = list(series[group])
        ax.boxplot([series[group][label] for label in labels], showfliers=False)
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right")
        ax.set_title(group)
        ax.set_ylabel(f"latency ({unit})")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(target, dpi=120)
    plt.close(fig)
