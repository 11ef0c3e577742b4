"""`serve` ready and its memory on a large kept store, before and after (issue 20 item 8).

Each run starts `serve` over stdio on a store `import_speed --keep` left (bench/serve_ready.py:
ready = the first search answered, through the real SDK client) and reads the server's RSS
then and after `--searches` more searches, and its CPU seconds at ready (they survive the
machine's load; wall time does not). Each run is a cold start (the index the last clean stop
kept is removed first: the start reads it from the store) then a warm one (`--starts`). With
`--before-tree` and `--before-store` every run also
starts the other tree's `service/` on its own copy of the store (a store this tree opened is
migrated, the other tree would refuse it), interleaved run by run, so both share the sitting:

    .venv/bin/python -m bench.startup_at_scale --store /tmp/startup100k \\
        --before-tree /tmp/startup-100k-before --before-store /tmp/startup100k-before --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.report import RESULTS, machine_load, write_report
from engram_memory.store.kept_index import FILE_NAME as KEPT_INDEX

ROOT = Path(__file__).resolve().parent.parent
# Issue 20's goals at 100k records.
GOAL_READY_S = 3.0
GOAL_RSS_MIB = 500.0


def _one(tree: Path, store: Path, searches: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{tree / 'service'}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.serve_ready",
            "--dir",
            str(store),
            "--searches",
            str(searches),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    print(json.dumps(result), file=sys.stderr, flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True, type=Path)
    parser.add_argument("--before-tree", type=Path)
    parser.add_argument("--before-store", type=Path)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--searches", type=int, default=1000)
    parser.add_argument(
        "--starts",
        choices=("cold", "warm", "both"),
        default="both",
        help="cold: the index kept by the last clean stop is removed first (the start reads "
        "the store, as after a crash or an import); warm: it is left (each run's stop keeps "
        "one); both: a cold then a warm start per run",
    )
    parser.add_argument("--name", default="startup_at_scale")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    starts = ("cold", "warm") if args.starts == "both" else (args.starts,)
    cases = [(f"after ({start})", ROOT, args.store, start == "cold") for start in starts]
    if args.before_tree is not None and args.before_store is not None:
        cases.insert(0, ("before", args.before_tree, args.before_store, False))
    load_before = machine_load()
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _, _ in cases}
    for _ in range(args.runs):
        for label, tree, store, cold in cases:
            kept = store / "data" / KEPT_INDEX
            if cold:
                kept.unlink(missing_ok=True)
            result = _one(tree, store, args.searches)
            result["index_kept_at_stop"] = kept.exists()
            runs[label].append(result)
    load_after = machine_load()
    series = {
        "ready (s)": {label: [r["ready_s"] for r in rows] for label, rows in runs.items()},
        "CPU to ready (s)": {
            label: [r["cpu_ready_s"] for r in rows] for label, rows in runs.items()
        },
        "RSS at ready (MiB)": {
            label: [r["rss_ready_mib"] for r in rows] for label, rows in runs.items()
        },
        f"RSS after {args.searches} searches (MiB)": {
            label: [r["rss_after_searches_mib"] for r in rows] for label, rows in runs.items()
        },
    }
    command = "python -m bench.startup_at_scale " + " ".join(sys.argv[1:])
    extra = {
        "load before": load_before,
        "load after": load_after,
        "goals": f"ready <= {GOAL_READY_S} s, RSS <= {GOAL_RSS_MIB} MiB at 100k records",
        "search p50 over stdio (ms)": {
            label: [r["search_ms_p50"] for r in rows] for label, rows in runs.items()
        },
        "index kept at each stop": {
            label: [r["index_kept_at_stop"] for r in rows] for label, rows in runs.items()
        },
    }
    print(
        write_report(
            args.name, "serve at scale: ready and RSS", command, series, "s|MiB", args.out, extra
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
