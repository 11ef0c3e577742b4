"""The search-at-scale report: summaries, ratios and goals as JSON, Markdown and one plot."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.report import percentile

LABELS = {
    "engram": "engram-memory",
    "reference": "MCP reference memory server",
    "basic-memory": "Basic Memory",
    "floor": "stdio floor (a do-nothing tool)",
}
_WHAT_A_QUERY_DOES = (
    "Per query, engram-memory ranks every eligible record (BM25F, SPEC §10) and returns a page "
    "of 10 governed packets (policy decision, redaction, receipts, an audit entry committed per "
    "call); the reference server re-reads and parses its whole JSONL file and returns every "
    "entity containing the whole query string; Basic Memory runs SQLite FTS5 (`search_type: "
    "text`, all words) and returns 10 a page. So the hit counts differ (last column). Ratios "
    "are the baseline's latency divided by engram-memory's, over stdio: > 1 = engram faster.",
)
_LATENCIES = ("search in-process", "search stdio", "get in-process")
_MIB = 1024 * 1024
# Issue 8's table: (size, measure, bound in ms or MiB); None = report only.
GOALS = (
    (10_000, "search in-process", "p50", 2.0),
    (10_000, "search in-process", "p99", 10.0),
    (10_000, "search stdio", "p50", 5.0),
    (10_000, "get in-process", "p50", 1.0),
    (100_000, "search in-process", "p50", 5.0),
    (100_000, "search in-process", "p99", 20.0),
    (100_000, "search stdio", "p50", 8.0),
    (100_000, "get in-process", "p50", 1.0),
    (100_000, "rss MiB", "value", 1024.0),
)


def stats(samples: Sequence[float]) -> dict[str, float | int]:
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        "p50": round(percentile(samples, 0.5), 3),
        "p90": round(percentile(samples, 0.9), 3),
        "p99": round(percentile(samples, 0.99), 3),
        "max": round(max(samples), 3),
        "mean": round(sum(samples) / len(samples), 3),
    }


def summarize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Percentiles per system and measure, per query kind for stdio search, sizes in MiB."""
    kinds: list[str] = raw["query kinds"]
    size_out: dict[str, Any] = {"skipped": raw["skipped"], "systems": {}}
    for system in ("engram", "reference", "basic-memory", "floor"):
        if system not in raw:
            continue
        measured = raw[system]
        summary: dict[str, Any] = {k: stats(measured[k]) for k in _LATENCIES if k in measured}
        if "hits" in measured:
            hits = measured["hits"]
            summary["queries with a hit"] = sum(1 for h in hits if h > 0)
            summary["search stdio by query kind"] = {
                kind: stats(
                    [t for t, k in zip(measured["search stdio"], kinds, strict=True) if k == kind]
                )
                for kind in sorted(set(kinds))
            }
        if "rss bytes" in measured:
            summary["rss MiB"] = round(measured["rss bytes"] / _MIB, 1)
        if "data bytes" in measured:
            summary["data bytes"] = measured["data bytes"]
            summary["data bytes per record"] = round(measured["data bytes"] / max(1, raw["size"]))
        if "loading" in measured:
            summary["loading"] = measured["loading"]
        size_out["systems"][system] = summary
    return size_out


def ratios(systems: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """How many times faster engram's stdio search is than each baseline's (p50 and p99)."""
    ours = systems.get("engram", {}).get("search stdio", {})
    found: dict[str, dict[str, float]] = {}
    for name in ("reference", "basic-memory"):
        theirs = systems.get(name, {}).get("search stdio", {})
        if ours.get("n") and theirs.get("n"):
            found[name] = {q: round(theirs[q] / ours[q], 2) for q in ("p50", "p99")}
    return found


def _cell(summary: Mapping[str, Any], measure: str) -> str:
    s = summary.get(measure, {})
    return f"{s['p50']} / {s['p99']}" if s.get("n") else "—"


def _size_section(size: str, result: Mapping[str, Any]) -> list[str]:
    systems = result["systems"]
    lines = [
        f"## {int(size):,} records",
        "",
        "| system | loaded via (seconds) | search in-process p50 / p99 ms "
        "| search stdio p50 / p99 ms | get in-process p50 / p99 ms | RSS MiB "
        "| bytes per record | queries with a hit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, summary in systems.items():
        loading = summary.get("loading", {})
        via = f"{loading['path']} ({loading['seconds']} s)" if loading else "—"
        lines.append(
            f"| {LABELS[name]} | {via} | {_cell(summary, 'search in-process')} | "
            f"{_cell(summary, 'search stdio')} | {_cell(summary, 'get in-process')} | "
            f"{summary.get('rss MiB', '—')} | {summary.get('data bytes per record', '—')} | "
            f"{summary.get('queries with a hit', '—')} |"
        )
    for name, reason in result["skipped"].items():
        lines.append(f"| {LABELS[name]} | skipped: {reason} | | | | | | |")
    if result.get("ratios"):
        lines.append("")
    for name, ratio in result.get("ratios", {}).items():
        lines.append(
            f"- stdio search, {LABELS[name]} ÷ engram-memory: "
            f"p50 {ratio['p50']}×, p99 {ratio['p99']}× (> 1 = engram faster)"
        )
    lines += [
        "",
        "stdio search by query kind, p50 / p99 ms:",
        "",
        "| system | " + " | ".join(_kinds(systems)) + " |",
        "|---|" + "---|" * len(_kinds(systems)),
    ]
    for name, summary in systems.items():
        by_kind = summary.get("search stdio by query kind")
        if by_kind:
            cells = [
                f"{by_kind[k]['p50']} / {by_kind[k]['p99']}" if k in by_kind else "—"
                for k in _kinds(systems)
            ]
            lines.append(f"| {LABELS[name]} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _kinds(systems: Mapping[str, Any]) -> list[str]:
    return sorted({k for s in systems.values() for k in s.get("search stdio by query kind", {})})


def goal_rows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Issue 8's speed goals against engram's figures, for the sizes this run reached."""
    rows = []
    for size, measure, quantile, bound in GOALS:
        engram = results.get(str(size), {}).get("systems", {}).get("engram")
        if engram is None:
            continue
        value = (
            engram.get(measure) if quantile == "value" else engram.get(measure, {}).get(quantile)
        )
        if value is not None:
            rows.append(
                {
                    "size": size,
                    "measure": f"{measure} {quantile}",
                    "goal": bound,
                    "measured": value,
                    "met": value <= bound,
                }
            )
    return rows


def write_search_report(
    name: str, meta: Mapping[str, Any], results: dict[str, Any], out: Path
) -> str:
    """Write `<name>.json|.md|.png`; return the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    for result in results.values():
        result["ratios"] = ratios(result["systems"])
    goals = goal_rows(results)
    document = {"meta": dict(meta), "sizes": results, "goals": goals}
    (out / f"{name}.json").write_text(json.dumps(document, indent=2) + "\n")
    lines = [
        "# Search at scale, side by side",
        "",
        f"`{meta['command']}` on {meta['machine']}, Python {meta['python']}, {meta['date']}; "
        f"{meta['machine load before']} before, {meta['machine load after']} after. "
        f"Seed {meta['seed']}, {meta['queries']} queries per size, the same for every system.",
        "",
        *_WHAT_A_QUERY_DOES,
        "",
    ]
    for size, result in results.items():
        lines += _size_section(size, result)
    if goals:
        lines += [
            "## Issue 8 goals (engram-memory)",
            "",
            "| size | measure | goal | measured | met |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {g['size']:,} | {g['measure']} | ≤ {g['goal']} | {g['measured']} | "
            f"{'yes' if g['met'] else 'no'} |"
            for g in goals
        ]
    markdown = "\n".join(lines) + "\n"
    (out / f"{name}.md").write_text(markdown)
    _plot(results, out / f"{name}.png")
    return markdown


def _plot(results: Mapping[str, Any], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(s) for s in results]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    series = [
        (s, "search stdio", f"{LABELS[s]} (stdio)") for s in ("engram", "reference", "basic-memory")
    ]
    series.append(("floor", "search stdio", LABELS["floor"]))
    series.insert(1, ("engram", "search in-process", "engram-memory in-process"))
    for ax, quantile in zip(axes, ("p50", "p99"), strict=True):
        for system, measure, label in series:
            points = [
                (size, results[str(size)]["systems"][system][measure][quantile])
                for size in sizes
                if results[str(size)]["systems"].get(system, {}).get(measure, {}).get("n")
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                style = "--" if system == "floor" else ":" if "in-process" in measure else "-"
                ax.plot(xs, ys, style, marker="o", label=label)
                for x, y in points:
                    ax.annotate(
                        f"{y:.1f}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
        ax.set_xlabel("records in scope")
        ax.set_title(f"search latency {quantile} (ms, log scale)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("ms")
    axes[0].legend(fontsize=8)
    fig.suptitle("Search at scale: same corpus, same queries, same run (stdio unless noted)")
    fig.tight_layout()
    fig.savefig(target, dpi=120)
    plt.close(fig)


def main() -> int:
    """`python -m bench.search_report RESULTS.json`: write the Markdown and the plot again
    from a run's JSON (same figures; for a changed layout, never for changed numbers)."""
    import sys

    path = Path(sys.argv[1])
    document = json.loads(path.read_text())
    sizes = document["sizes"]
    for result in sizes.values():
        result.pop("ratios", None)
    write_search_report(path.stem, document["meta"], sizes, path.parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
