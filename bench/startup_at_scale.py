"""`serve` ready and its memory on a large kept store, before and after (issue 20 item 8).

Each run starts `serve` over stdio on a store `import_speed --keep` left (bench/serve_ready.py:
ready = the first search answered, through the real SDK client) and reads the server's RSS
then and after `--searches` more searches, and its CPU seconds at ready (they survive the
machine's load; wall time does not). With `--before-tree` and `--before-store` every run also
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
    parser.add_argument("--name", default="startup_at_scale")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    cases = [("after", ROOT, args.store)]
    if args.before_tree is not None and args.before_store is not None:
        cases.insert(0, ("before", args.before_tree, args.before_store))
    load_before = machine_load()
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in cases}
    for _ in range(args.runs):
        for label, tree, store in cases:
            runs[label].append(_one(tree, store, args.searches))
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
    }
    print(
        write_report(
            args.name, "serve at scale: ready and RSS", command, series, "s|MiB", args.out, extra
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
