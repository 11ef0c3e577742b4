"""Which call log: our segment files, SQLite, or DuckDB itself as the commit point (issue 20).

Usage: python -m bench.call_log [--appends 400] [--record-bytes 3072] [--threads 1,4,16]
       [--out DIR]

Each candidate makes one ~3 KB record per call durable before the call returns, with the
same guarantee (the record is on stable storage: fdatasync, SQLite `synchronous=FULL` in WAL
mode, a DuckDB COMMIT), from 1, 4 and 16 threads at once, each thread appending its share
of `--appends` one record at a time:
- `segment`: engram_memory.store.call_log.SegmentLog (group commit: one flush per group);
- `sqlite`: the standard library's SQLite, WAL, synchronous=FULL, one INSERT + COMMIT per
  call under one connection and a lock (SQLite has no group commit of its own);
- `duckdb`: one INSERT + COMMIT per call, today's commit point;
- the floor: one `write` + `fdatasync` of the record to a plain file, one thread.
Reported: per-call latency (ms) and calls/s per candidate and thread count, the flushes the
segment log did, and the machine load before and after.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from bench.report import RESULTS, machine_load, percentile, write_report
from engram_memory.store.call_log import SegmentLog

Append = Callable[[bytes], None]


def _floor(directory: Path, record: bytes, appends: int) -> list[float]:
    fd = os.open(directory / "floor.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    samples = []
    try:
        for _ in range(appends):
            started = time.perf_counter()
            os.write(fd, record)
            os.fdatasync(fd)
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)
    return samples


def _segment(directory: Path) -> tuple[Append, Callable[[], str]]:
    log = SegmentLog(directory / "log", os.urandom(32))
    return (lambda record: log.append([record]) and None), lambda: f"{log.flushes} flushes"


def _sqlite(directory: Path) -> tuple[Append, Callable[[], str]]:
    connection = sqlite3.connect(directory / "log.sqlite", check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
    lock = threading.Lock()

    def append(record: bytes) -> None:
        with lock, connection:
            connection.execute("INSERT INTO log (payload) VALUES (?)", (record,))

    return append, lambda: ""


def _duckdb(directory: Path) -> tuple[Append, Callable[[], str]]:
    connection = duckdb.connect(str(directory / "log.duckdb"))
    connection.execute("CREATE SEQUENCE seq")
    connection.execute("CREATE TABLE log (seq BIGINT DEFAULT nextval('seq'), payload BLOB)")
    lock = threading.Lock()

    def append(record: bytes) -> None:
        with lock:
            connection.execute("BEGIN TRANSACTION")
            connection.execute("INSERT INTO log (payload) VALUES (?)", [record])
            connection.execute("COMMIT")

    return append, lambda: ""


CANDIDATES = {"segment": _segment, "sqlite": _sqlite, "duckdb": _duckdb}


def _run(append: Append, record: bytes, threads: int, appends: int) -> tuple[list[float], float]:
    samples: list[float] = []
    guard = threading.Lock()
    start = threading.Barrier(threads + 1)
    share = max(1, appends // threads)

    def worker() -> None:
        mine = []
        start.wait()
        for _ in range(share):
            began = time.perf_counter()
            append(record)
            mine.append((time.perf_counter() - began) * 1000)
        with guard:
            samples.extend(mine)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in workers:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in workers:
        thread.join()
    elapsed = time.perf_counter() - began
    return samples, len(samples) / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--appends", type=int, default=400, help="calls per measurement")
    parser.add_argument("--record-bytes", type=int, default=3072)
    parser.add_argument("--threads", default="1,4,16")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    record = os.urandom(args.record_bytes // 2).hex().encode()[: args.record_bytes]
    thread_counts = [int(n) for n in args.threads.split(",")]
    load_before = machine_load()
    series: dict[str, dict[str, list[float]]] = {}
    figures: dict[str, object] = {"load before": load_before}
    with tempfile.TemporaryDirectory(prefix="engram-bench-log-") as tmp:
        root = Path(tmp)
        series["floor"] = {"write+fdatasync": _floor(root, record, args.appends)}
        for threads in thread_counts:
            group = f"{threads} thread{'s' if threads > 1 else ''}"
            series[group] = {}
            for name, make in CANDIDATES.items():
                print(f"{group}: {name}", file=sys.stderr, flush=True)
                directory = root / f"{name}-{threads}"
                directory.mkdir()
                append, note = make(directory)
                samples, rate = _run(append, record, threads, args.appends)
                series[group][name] = samples
                extra = note()
                figures[f"{name}, {group}"] = (
                    f"{rate:.0f} calls/s, p50 {percentile(samples, 0.5):.3f} ms"
                    + (f", {extra}" if extra else "")
                )
    figures["load after"] = machine_load()
    command = "python -m bench.call_log " + " ".join(argv if argv is not None else sys.argv[1:])
    print(
        write_report(
            "call_log",
            "The commit point: a durable 3 KB record per call",
            command.strip(),
            series,
            "ms",
            out=args.out,
            extra=figures,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
