"""The semantic_recall report: markdown (every figure beside its goal from issue 21) and plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Issue 21's Goals table.
PARAPHRASE_GOAL = 0.8
LEXICAL_PARAPHRASE_CEILING = 0.2
KEYWORD_SLACK = 0.02
P50_GOALS_MS = {10_000: 10.0, 100_000: 25.0}
EMBEDDING_GOAL = 300
EXTRA_RSS_GOAL_MIB = 300


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _goal_rows(report: dict[str, Any]) -> list[str]:
    rows = ["| measure | goal | measured | |", "|---|---|---|---|"]
    for result in report["results"]:
        size, quality = result["size"], result["quality"]
        semantic = quality["paraphrase"]["semantic_v1"]["recall@10"]
        lexical = quality["paraphrase"]["offline_lexical_v1"]["recall@10"]
        rows.append(
            f"| paraphrase recall@10, {size:,} records | semantic_v1 ≥ {PARAPHRASE_GOAL}, "
            f"lexical ≤ {LEXICAL_PARAPHRASE_CEILING} | semantic_v1 {semantic}, lexical "
            f"{lexical} | {_met(semantic >= PARAPHRASE_GOAL)} (lexical "
            f"{_met(lexical <= LEXICAL_PARAPHRASE_CEILING)}) |"
        )
        keyword = quality["keyword"]
        k_sem = keyword["semantic_v1"]["recall@10"]
        k_lex = keyword["offline_lexical_v1"]["recall@10"]
        rows.append(
            f"| keyword recall@10, {size:,} records | semantic_v1 ≥ lexical − {KEYWORD_SLACK} | "
            f"{k_sem} vs {k_lex} | {_met(k_sem >= k_lex - KEYWORD_SLACK)} |"
        )
        goal = P50_GOALS_MS.get(size)
        p50 = result["latency_ms"]["semantic_v1"]["p50"]
        rows.append(
            f"| search p50 in process, {size:,} records | "
            + (f"≤ {goal:g} ms | {p50} ms | {_met(p50 <= goal)} |" if goal else f"— | {p50} ms | |")
        )
    rate = min(r["embedding_records_per_s"] for r in report["results"])
    rows.append(
        f"| embedding throughput (batches of 512, 2 cores) | ≥ {EMBEDDING_GOAL} records/s | "
        f"{rate} records/s (slowest size) | {_met(rate >= EMBEDDING_GOAL)} |"
    )
    extra = report.get("extra_rss")
    if extra:
        rows.append(
            f"| extra RSS at {extra['records']:,} records | ≤ {EXTRA_RSS_GOAL_MIB} MiB | "
            f"{extra['extra_rss_mib']} MiB | {_met(extra['extra_rss_mib'] <= EXTRA_RSS_GOAL_MIB)} |"
        )
    installed = report["installed"]
    rows.append(
        f"| installed size of the extra | stated | {installed['extra_total_mib']} MiB "
        f"(+ {installed['model_files_in_engram_memory_mib']} MiB model in the package) | |"
    )
    return rows


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# semantic_v1 vs offline_lexical_v1: planted paraphrases, latency, costs",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {report['machine']}; {report['load_before']} before, "
        f"{report['load_after']} after.  ",
        f"Model: `{report['model_ref']}`; 24 planted records, one paraphrase and "
        "one keyword query each.",
        "",
        "## Against the goals of issue 21",
        "",
        *_goal_rows(report),
        "",
    ]
    for result in report["results"]:
        lines += [
            f"## {result['size']:,} records, in process",
            "",
            "| query kind | ranking | recall@10 | nDCG@10 |",
            "|---|---|---|---|",
        ]
        for kind, rows in result["quality"].items():
            for name, row in rows.items():
                lines.append(f"| {kind} | {name} | {row['recall@10']} | {row['ndcg@10']} |")
        lines += [
            "",
            "| timed call | p50 ms | p99 ms | CPU time p50 ms | n |",
            "|---|---|---|---|---|",
        ]
        for name, row in result["latency_ms"].items():
            lines.append(
                f"| {name} | {row['p50']} | {row['p99']} | {row['cpu_p50']} | {row['n']} |"
            )
        lines += [
            "",
            f"Embedding: {result['embedding_records_per_s']} records/s in batches of 512 "
            "(the follower's and the start-up path), "
            f"{result['embedding_one_text_at_a_time_records_per_s']} records/s one text at "
            f"a time; vectors {result['vector_bytes'] / 2**20:.1f} MiB; adjacency edges "
            f"{result['edges']}.  ",
            "Paraphrase queries: lexical list of "
            f"{result['paraphrase_lexical_hits_mean']} records (cap 2,000) on "
            "average (words the corpus uses everywhere, such as `delivery`, `customer`, `the`); "
            "share of the PageRank list's top 60 that is the lexical list's top 60: "
            f"{result['paraphrase_ppr_top60_is_lexical_top60']}.",
            "",
        ]
    lines += _cost_lines(report)
    return "\n".join(lines)


def _cost_lines(report: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    extra = report.get("extra_rss")
    if extra:
        lines += [
            f"## Memory at {extra['records']:,} records (in process)",
            "",
            f"RSS with the lexical index only {extra['rss_lexical_only_mib']} MiB; with the "
            f"model loaded and every record embedded {extra['rss_with_semantic_mib']} MiB: "
            f"**{extra['extra_rss_mib']} MiB extra**.",
            "",
        ]
    installed = report["installed"]
    packages = ", ".join(f"{name} {mib} MiB" for name, mib in installed["packages_mib"].items())
    lines += [
        "## Installed size",
        "",
        f"What only the `[semantic]` extra installs: {packages}; total "
        f"{installed['extra_total_mib']} MiB. The model files inside engram-memory: "
        f"{installed['model_files_in_engram_memory_mib']} MiB.",
        "",
    ]
    for run in report["stdio"]:
        with_channel, without = run["semantic_v1"], run["without_the_extra"]
        lines += [
            f"## Over stdio, {run['records']:,} records (real `serve`, real SDK client)",
            "",
            f"Store loaded by {run['loading']['path']} in {run['loading']['seconds']} s "
            f"({run['loading']['records per second']} records/s, semantic channel on).",
            "",
            "| server | profile | search p50 ms | p99 ms | n | RSS MiB |",
            "|---|---|---|---|---|---|",
            f"| with the channel (`lexical_and_semantic`) | {', '.join(with_channel['profiles'])} "
            f"| {with_channel['p50_ms']} | {with_channel['p99_ms']} | {with_channel['n']} "
            f"| {with_channel['rss_mib']} |",
            f"| without the extra (`lexical`) | {', '.join(without['profiles'])} "
            f"| {without['p50_ms']} | {without['p99_ms']} | {without['n']} "
            f"| {without['rss_mib']} |",
            f"| floor: a do-nothing tool over stdio | — | {run['stdio_floor']['p50_ms']} "
            f"| {run['stdio_floor']['p99_ms']} | {run['stdio_floor']['n']} | — |",
            "",
            f"Extra RSS of the server: {run['extra_rss_mib']} MiB.",
            "",
        ]
    return lines


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    names = list(results[0]["quality"]["paraphrase"])
    figure, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    width = 0.8 / len(names)
    for axis, kind in zip(axes[:2], ("paraphrase", "keyword"), strict=True):
        for n, name in enumerate(names):
            values = [r["quality"][kind][name]["recall@10"] for r in results]
            xs = [i + n * width for i in range(len(results))]
            axis.bar(xs, values, width, label=name)
        axis.set_xticks([i + 0.4 - width / 2 for i in range(len(results))])
        axis.set_xticklabels([f"{r['size']:,} records" for r in results])
        axis.set_ylim(0, 1.05)
        axis.set_title(f"recall@10, {kind} queries")
    axes[0].axhline(PARAPHRASE_GOAL, color="grey", linestyle="--", linewidth=1)
    axes[0].legend(fontsize=7, loc="upper left")
    sizes = [r["size"] for r in results]
    latency = axes[2]
    for name in results[0]["latency_ms"]:
        line = latency.plot(
            sizes, [r["latency_ms"][name]["p50"] for r in results], marker="o", label=name
        )
        if name in ("semantic_v1", "offline_lexical_v1"):
            latency.plot(
                sizes,
                [r["latency_ms"][name]["cpu_p50"] for r in results],
                linestyle=":",
                marker="x",
                color=line[0].get_color(),
                label=f"{name}, CPU time",
            )
    goals = sorted(P50_GOALS_MS.items())
    latency.plot([s for s, _ in goals], [g for _, g in goals], "k--", linewidth=1, label="p50 goal")
    latency.set_xscale("log")
    latency.set_yscale("log")
    latency.set_xlabel("records")
    latency.set_ylabel("p50 ms in process (wall; dotted: CPU time)")
    latency.set_title(f"latency ({report['load_before']} before)", fontsize=9)
    latency.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
