"""Build an engram-memory store of N corpus records with `engram-memory import`, to measure later.

Usage: .venv/bin/python -m bench.search_store --records 100000 --dir /srv/bench100k [--seed 8]

At ~20-25 lines/s a 100k store takes over an hour to import; building it once, apart from
the measurement, lets `python -m bench.search_scale --sizes 100000 --engram-store DIR` measure
it (with the same corpus and queries: same size, same seed) without importing again. The
import's progress goes to stderr; `DIR/load.json` records how the store was built.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.corpus import write_corpus
from bench.report import machine_load
from bench.search_engram import EngramSetup, load_corpus
from bench.stdio_probe import progress


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()
    workdir = Path(args.dir)
    setup = EngramSetup.create(workdir)  # keeps existing keys: a rerun resumes the import
    corpus = workdir / f"corpus-{args.records}.jsonl"
    if not corpus.exists():
        progress(f"writing the corpus ({args.records} records, seed {args.seed})")
        write_corpus(corpus, args.records, args.seed)
    load_before = machine_load()
    started = time.time()
    loading = load_corpus(setup, corpus)
    record = {
        "records": args.records,
        "seed": args.seed,
        "loading": loading,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "machine load before": load_before,
        "machine load after": machine_load(),
    }
    (workdir / "load.json").write_text(json.dumps(record, indent=2))
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
