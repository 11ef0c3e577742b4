"""Search at scale, side by side: engram-memory, the MCP reference memory server, Basic Memory.

Usage: .venv/bin/python -m bench.search_scale [--sizes 1000,10000,100000] [--queries 200]
       [--systems engram,reference,basic-memory] [--basic-memory-budget 1800] [--out DIR]

For each size, one seeded corpus (bench/corpus.py) and one query list (1-3 words: words of
the corpus, frequent words in > 10 % of the records, words absent from it) go to every
system, in the same run:

- engram-memory: loaded with `engram-memory import` (or the tools, on a tree without it);
  search p50/p99 in-process and over stdio (real SDK client, real `serve` process), get p50
  in-process, the server's RSS, data directory bytes per record (bench/search_engram.py);
- the reference memory server and Basic Memory, each through its own MCP search tool over
  stdio (bench/search_baselines.py). Basic Memory's loading shares one time budget across
  sizes (30 minutes by default); sizes it cannot reach within it are reported as such;
- the transport floor: a do-nothing tool over stdio (bench/floor_server.py).

Writes `<name>.{json,md,png}` into --out (default bench/results, name `search_scale`), with
the command, date, machine load before and after, and the floor. Progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from bench import search_engram
from bench.corpus import Query, queries, write_corpus
from bench.report import RESULTS, machine, machine_load
from bench.search_baselines import BasicMemory, ReferenceServer, Unavailable, log_unavailable
from bench.search_report import summarize, write_search_report
from bench.stdio_probe import progress
from bench.tools_stdio import stdio_floor

SYSTEMS = ("engram", "reference", "basic-memory")


def _engram(
    workdir: Path,
    corpus: Path,
    texts: Sequence[str],
    size: int,
    gets: int,
    store: Path | None = None,
) -> dict[str, Any]:
    if store is not None:
        # Built beforehand by `python -m bench.search_store` (same size and seed): kept.
        setup = search_engram.EngramSetup.create(store)
        built = json.loads((store / "load.json").read_text())
        if built["records"] != size:
            raise SystemExit(f"--engram-store holds {built['records']} records, not {size}")
        loading = {**built["loading"], "path": built["loading"]["path"] + " (bench.search_store)"}
    else:
        setup = search_engram.EngramSetup.create(workdir / "engram")
        progress(f"  engram-memory: loading {size} records")
        loading = search_engram.load_corpus(setup, corpus)
    progress(f"  engram-memory: loaded in {loading['seconds']} s via {loading['path']}")
    data_bytes = search_engram.data_bytes(setup)
    local = search_engram.measure_in_process(setup, texts, gets)
    remote = search_engram.measure_stdio(setup, texts, workdir / "engram-serve.log")
    if store is None:
        shutil.rmtree(workdir / "engram", ignore_errors=True)
    return {
        "loading": loading,
        "search in-process": local["search"],
        "get in-process": local["get"],
        "search stdio": remote["search"],
        "hits": remote["hits"],
        "hits in-process": local["hits"],
        "rss bytes": remote["rss bytes"],
        "data bytes": data_bytes,
    }


def _reference(workdir: Path, corpus: Path, texts: Sequence[str]) -> dict[str, Any]:
    server = ReferenceServer(workdir / "reference")
    server.install()
    progress("  reference memory server: writing its memory file")
    loading = server.load(corpus)
    measured = server.measure(texts)
    shutil.rmtree(server.workdir, ignore_errors=True)
    return {"loading": loading, "search stdio": measured.pop("search"), **measured}


def _basic_memory(
    workdir: Path, corpus: Path, texts: Sequence[str], budget: float
) -> dict[str, Any]:
    basic = BasicMemory(workdir / "basic-memory")
    basic.install()
    progress(f"  basic memory: loading (budget left {budget:.0f} s)")
    loading = basic.load(corpus, budget)
    progress(f"  basic memory: loaded in {loading['seconds']} s")
    measured = basic.measure(texts)
    shutil.rmtree(basic.workdir, ignore_errors=True)
    return {"loading": loading, "search stdio": measured.pop("search"), **measured}


class LoadingBudget:
    """Basic Memory's loading time, shared across sizes (its indexing is slow): a size is
    not tried when the rate measured at a smaller size says it cannot finish in what is
    left, and a load still running when the budget ends is stopped."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds
        self.rate: float | None = None  # records per second at the last completed size

    def refusal(self, size: int) -> str | None:
        """Why `size` is not tried, or None."""
        if self.left <= 0:
            return "its loading budget was spent at smaller sizes"
        if self.rate and size / self.rate > self.left:
            return (
                f"not reached: at its measured {self.rate:.1f} records/s, {size} records "
                f"need ~{size / self.rate:.0f} s, {self.left:.0f} s of the budget are left"
            )
        return None

    def spent(self, size: int, seconds: float) -> None:
        self.left -= seconds
        self.rate = size / max(seconds, 1e-9)


def run_size(
    workdir: Path, size: int, args: argparse.Namespace, budget: LoadingBudget
) -> dict[str, Any]:
    """Every selected system at one size, on one corpus and one query list."""
    workdir.mkdir(parents=True, exist_ok=True)
    corpus = workdir / f"corpus-{size}.jsonl"
    progress(f"size {size}: writing the corpus")
    write_corpus(corpus, size, args.seed)
    made: list[Query] = queries(corpus, args.queries, args.seed)
    texts = [q.text for q in made]
    result: dict[str, Any] = {"size": size, "query kinds": [q.kind for q in made], "skipped": {}}
    progress(f"size {size}: the stdio floor (a do-nothing tool)")
    result["floor"] = {"search stdio": anyio.run(stdio_floor, len(texts))}
    if "engram" in args.systems:
        store = Path(args.engram_store) if args.engram_store else None
        result["engram"] = _engram(workdir, corpus, texts, size, args.gets, store)
    if "reference" in args.systems:
        try:
            result["reference"] = _reference(workdir, corpus, texts)
        except Unavailable as reason:
            result["skipped"]["reference"] = log_unavailable("reference memory server", reason)
    if "basic-memory" in args.systems:
        refusal = budget.refusal(size)
        if refusal:
            result["skipped"]["basic-memory"] = log_unavailable(
                "basic memory", Unavailable(refusal)
            )
        else:
            start = time.perf_counter()
            try:
                result["basic-memory"] = _basic_memory(workdir, corpus, texts, budget.left)
                budget.spent(size, result["basic-memory"]["loading"]["seconds"])
            except Unavailable as failure:
                result["skipped"]["basic-memory"] = log_unavailable("basic memory", failure)
                budget.spent(size, time.perf_counter() - start)
    corpus.unlink()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--gets", type=int, default=100, help="get calls (ids from the searches)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--basic-memory-budget", type=float, default=1800.0, help="seconds")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--name", default="search_scale")
    parser.add_argument(
        "--engram-store", help="a store `python -m bench.search_store` built for the one size"
    )
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    command = "python -m bench.search_scale " + " ".join(sys.argv[1:] if argv is None else argv)
    load_before = machine_load()
    budget = LoadingBudget(args.basic_memory_budget)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="engram-search-scale-") as tmp:
        for size in sizes:
            results[str(size)] = summarize(run_size(Path(tmp) / str(size), size, args, budget))
    meta = {
        **machine(),
        "command": command.strip(),
        "seed": args.seed,
        "queries": args.queries,
        "machine load before": load_before,
        "machine load after": machine_load(),
    }
    print(write_search_report(args.name, meta, results, Path(args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
