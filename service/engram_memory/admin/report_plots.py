"""The report's plots, PNG files beside report.html (matplotlib, the `audit-report` extra).

Matplotlib is optional: without it `plots` returns no files and one line saying why, and the
report shows the same figures as tables only. The Agg backend is chosen before pyplot is
imported, so no display is ever needed.
"""

from __future__ import annotations

import importlib.util
from datetime import datetime
from pathlib import Path
from typing import Any

from engram_memory.admin.report_data import QueryAnswer, resolution_seconds

MISSING_LINE = (
    "plots omitted: matplotlib is not installed "
    "(pip install 'engram-memory[audit-report]'); the tables below hold every figure"
)


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def plots(answers: dict[str, QueryAnswer], out_dir: Path) -> tuple[dict[str, str], str | None]:
    """PNG files written into `out_dir`, by section name (file names relative to it), and the
    line explaining why there are none (None when plotting was possible)."""
    if not available():
        return {}, MISSING_LINE
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    written: dict[str, str] = {}

    def save(name: str, figure: Any) -> None:
        figure.tight_layout()
        figure.savefig(out_dir / f"{name}.png", dpi=96)
        plt.close(figure)
        written[name] = f"{name}.png"

    per_day = answers["calls_per_day"]
    if per_day.rows:
        figure, axes = plt.subplots(figsize=(8, 3))
        days = [str(d) for d in per_day.column("day")]
        calls = [int(v) for v in per_day.column("calls")]
        refusals = [int(v) for v in per_day.column("refusals")]
        axes.bar(days, calls, label="calls", color="#4c78a8")
        axes.bar(days, refusals, label="refusals", color="#e45756")
        axes.set_ylabel("per UTC day")
        axes.legend()
        axes.tick_params(axis="x", labelrotation=45)
        save("calls_per_day", figure)
    reasons = answers["refusals_by_reason"]
    if reasons.rows:
        figure, axes = plt.subplots(figsize=(8, 0.6 + 0.35 * len(reasons.rows)))
        axes.barh(
            [str(c) for c in reasons.column("code")][::-1],
            [int(v) for v in reasons.column("refusals")][::-1],
            color="#e45756",
        )
        axes.set_xlabel("refusals")
        save("refusals_by_reason", figure)
    runs = answers["revisions_in_force"]
    if runs.rows:
        figure, axes = plt.subplots(figsize=(8, 0.8 + 0.4 * len(runs.rows)))
        for index, row in enumerate(runs.rows):
            begin, last = (
                row[runs.columns.index("in_force_from")],
                row[runs.columns.index("last_call_at")],
            )
            until = row[runs.columns.index("until")] or last
            if isinstance(begin, datetime) and isinstance(until, datetime):
                axes.barh(
                    index,
                    (until - begin).total_seconds() / 86400 or 1e-4,
                    left=mdates.date2num(begin),  # type: ignore[no-untyped-call]
                )
        axes.set_yticks(range(len(runs.rows)))
        axes.set_yticklabels([_short(str(r)) for r in runs.column("bundle_revision")])
        axes.xaxis_date()
        figure.autofmt_xdate()
        save("revisions_in_force", figure)
    waits = resolution_seconds(answers["admissions_held"])
    if waits:
        figure, axes = plt.subplots(figsize=(8, 3))
        axes.hist(waits, bins=min(20, max(1, len(waits))), color="#72b7b2")
        axes.set_xlabel("seconds from hold to resolution")
        axes.set_ylabel("admissions")
        save("admissions_held", figure)
    return written, None


def _short(revision: str) -> str:
    """`label+sha256:abcdef...` as `label+abcdef12` for an axis label."""
    label, _, digest = revision.partition("+")
    return f"{label}+{digest.removeprefix('sha256:')[:8]}" if digest else revision[:24]
