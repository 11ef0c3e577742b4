"""What keeping decision inputs costs a call, and how fast `policy replay` re-decides them
(issue 22 item 4).

Usage: python -m bench.decision_replay [--rounds 100] [--replays 3] [--out DIR]

Two in-process services assembled as `serve` assembles them (bench/hot_path.py), one keeping
every decision's input and result (ENGRAM_DECISION_INPUT_RETENTION_DAYS=90, the default) and
one keeping none (0), run the same rounds of capture, admission, search, get, forget and
withdraw, interleaved round by round so the machine's load falls on both alike. Reported: each
tool's p50/p90/p99 in both; the kept rows and their bytes per call; the data directories'
sizes. Then `policy replay` (admin/policy_replay.py, the embedded engine on the shipped
bundle, the store opened read-only) re-decides every kept input `--replays` times: wall time
and decisions per second. The floor: the same decisions evaluated by the engine alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from bench.hot_path import Caller, _round, _services
from bench.report import RESULTS, machine_load, write_report
from engram_memory.admin.policy_replay import replay
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.database import Database
from engram_memory.tools.dispatch import MemoryService


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def _kept(data_dir: Path) -> tuple[int, int, list[tuple[str, str]]]:
    """(rows, bytes of input and result text, [(path, input)]) of the kept decisions."""
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            rows = tx.fetchall("SELECT policy_path, input_json, result_json FROM decision_inputs")
    finally:
        database.close()
    text = sum(len(str(i)) + len(str(r)) for _, i, r in rows)
    return len(rows), text, [(str(p), str(i)) for p, i, _ in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--replays", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = machine_load()
    engine = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR)
    samples: dict[str, dict[str, list[float]]] = {
        "inputs kept (90 days)": defaultdict(list),
        "inputs not kept (0)": defaultdict(list),
    }
    with tempfile.TemporaryDirectory(prefix="engram-replay-bench-") as scratch:
        dirs = {label: Path(scratch) / f"data-{n}" for n, label in enumerate(samples)}
        callers = {}
        for label, directory in dirs.items():
            services = _services(directory, engine)
            days = 90 if "kept (" in label else 0
            services.settings = replace(services.settings, decision_input_retention_days=days)
            callers[label] = (services, Caller(MemoryService(services)))
        for i in range(args.rounds):
            for label, (_, caller) in callers.items():
                _round(caller, samples[label], i)
            if i % 25 == 0:
                print(f"round {i}/{args.rounds}", file=sys.stderr)
        for services, _ in callers.values():
            services.database.close()
        kept_dir = dirs["inputs kept (90 days)"]
        rows, text_bytes, inputs = _kept(kept_dir)
        calls = sum(len(v) for v in samples["inputs kept (90 days)"].values())
        replay_ms: list[float] = []
        open_ms: list[float] = []
        for _ in range(args.replays):
            # A fresh engine each time, as the command opens one: no answer remembered. Its
            # load (Wasm compilation) is timed apart from the replay.
            started = time.perf_counter()
            candidate = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR)
            open_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            report = replay(kept_dir, candidate, candidate.identity.revision, (0, 2**62))
            replay_ms.append((time.perf_counter() - started) * 1000)
            candidate.close()
        assert report.flipped == 0, "the shipped bundle replayed against itself changed"
        floor = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR, memo_entries=0)
        started = time.perf_counter()
        for path, text in inputs:
            floor.evaluate(path.removeprefix("data."), json.loads(text))
        floor_ms = (time.perf_counter() - started) * 1000
        floor.close()
        sizes = {label: _size(directory) for label, directory in dirs.items()}
    engine.close()
    series: dict[str, dict[str, list[float]]] = {k: dict(v) for k, v in samples.items()}
    series["policy replay (ms, whole store)"] = {
        "replay (store opened read-only, every kept input)": replay_ms,
        "floor: the engine alone, same inputs, no answer memo": [floor_ms],
        "loading the candidate bundle (once per command)": open_ms,
    }
    median_replay = sorted(replay_ms)[len(replay_ms) // 2]
    figures = {
        "rounds": args.rounds,
        "calls per service": calls,
        "kept decisions": rows,
        "kept decisions per call": round(rows / max(calls, 1), 2),
        "kept bytes per call (input + result text)": round(text_bytes / max(calls, 1)),
        "data directory bytes, inputs kept": sizes["inputs kept (90 days)"],
        "data directory bytes, inputs not kept": sizes["inputs not kept (0)"],
        "replay decisions per second (median)": round(rows / (median_replay / 1000)),
        "load before": load_before,
        "load after": machine_load(),
    }
    command = f"python -m bench.decision_replay --rounds {args.rounds} --replays {args.replays}"
    print(
        write_report(
            "decision_replay",
            "Decision inputs kept for replay: cost per call, and replay speed",
            command,
            series,
            "ms",
            out=args.out,
            extra=figures,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
