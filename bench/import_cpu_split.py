"""`engram-memory import`'s CPU a line, split between the writing process and its workers.

Usage: .venv/bin/python -m bench.import_cpu_split --corpus FILE [--batch 1000] [--workers 2]
       [--profile OUT]

`bench.import_speed` runs the CLI as a child and can only see the CPU of the import and its
workers together. The writer (the import process) is one process and was the bound, so
this runs the same CLI entry point in this process, on a fresh data directory set up as
`bench.import_speed` sets it up (globex/main, embedded engine, checkpoint key): this
process's CPU is the writer's, that of its reaped children the workers'. Both include
their start-up (imports, engine load: ~1 s each), so use a corpus of 10k lines or more.
`--profile OUT` keeps a cProfile of this process (the workers are spawned, never
profiled; the pool's result thread, which unpickles the prepared lines, is not seen).
Prints one JSON line: lines, wall seconds, lines/s, writer and workers CPU ms a line, load.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from bench.import_speed import BINDING, OPERATOR
from bench.report import machine_load
from engram_memory.admin.host_setup import CHECKPOINT_KEY_FILE, init_host_dir


def _cpu_s(who: int) -> float:
    used = resource.getrusage(who)
    return used.ru_utime + used.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--profile", default="")
    args = parser.parse_args()
    corpus = Path(args.corpus)
    lines = sum(1 for text in corpus.open("rb") if text.strip())
    with tempfile.TemporaryDirectory(prefix="import-cpu-split-") as work:
        root, _, public = init_host_dir(Path(work) / "secrets")
        os.environ["ENGRAM_DATA_DIR"] = str(Path(work) / "data")
        os.environ["ENGRAM_ROOT_KEY"] = str(root)
        os.environ["ENGRAM_HOST_KEYS"] = str(public)
        os.environ["ENGRAM_CHECKPOINT_KEY"] = str(root.parent / CHECKPOINT_KEY_FILE)
        from engram_memory.cli.main import main as cli

        tenant, workspace, principal, purpose = BINDING
        argv = ["import", "--tenant", tenant, "--workspace", workspace, "--principal"]
        argv += [principal, "--purpose", purpose, "--operator", OPERATOR]
        argv += ["--batch", str(args.batch), "--workers", str(args.workers), str(corpus)]
        load_before = machine_load()
        profile = cProfile.Profile() if args.profile else None
        writer, started = _cpu_s(resource.RUSAGE_SELF), time.monotonic()
        progress = io.StringIO()
        with contextlib.redirect_stderr(progress), contextlib.redirect_stdout(io.StringIO()):
            if profile is not None:
                profile.enable()
            code = cli(argv)
            if profile is not None:
                profile.disable()
        seconds = time.monotonic() - started
        writer = _cpu_s(resource.RUSAGE_SELF) - writer
        workers = _cpu_s(resource.RUSAGE_CHILDREN)  # the pool was joined: all reaped
    if profile is not None:
        profile.dump_stats(args.profile)
    print(
        json.dumps(
            {
                "exit": code,
                "lines": lines,
                "seconds": round(seconds, 1),
                "lines_per_s": round(lines / seconds, 1),
                "writer_cpu_ms_per_line": round(writer * 1000 / lines, 2),
                "workers_cpu_ms_per_line": round(workers * 1000 / lines, 2),
                "load_before": load_before,
                "load_after": machine_load(),
                "last_progress": progress.getvalue().strip().splitlines()[-1:],
            }
        )
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
