"""Where the milliseconds of `get` and `search` go, in-process, on a store built beforehand.

Usage: .venv/bin/python -m bench.read_profile --store DIR [--calls 300] [--top 25]

DIR is a store built by `python -m bench.search_store` (its corpus and keys are kept there).
The service is opened as `serve` opens it; after a warm-up, `--calls` searches (queries of
the corpus, as bench.search_scale draws them) and `--calls` gets of the records they found
run once unprofiled (wall p50 and p99, CPU time per call: `time.process_time`), then
again under cProfile around `MemoryService.call_tool`. Prints, per tool: those, DuckDB
statements and read snapshots per call, and the cumulative time per
call of each stage of the call (token and envelope checks, policy decision, DuckDB reads,
key file read and unseal, redaction, packet building, canonical JSON, digests, the audit
append with its flush and anchor), then the top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from bench.corpus import queries
from bench.search_engram import BINDING, EngramSetup, InProcessCaller
from engram_memory.core.service_config import load_config
from engram_memory.host.keys import HostSigningKey
from engram_memory.server.app import open_service

# Stage name -> (module path fragment, function name) whose cumulative time is the stage's.
STAGES: dict[str, tuple[str, str]] = {
    "whole call (call_tool)": ("tools/dispatch.py", "call_tool"),
    "token verification": ("host/context.py", "verify_invocation"),
    "policy decision (authorize)": ("core/steps.py", "authorize"),
    "record redaction decisions": ("tools/record_redaction.py", "applied"),
    "DuckDB read snapshot (reading)": ("store/database.py", "reading"),
    "DuckDB statements (fetchall)": ("store/transaction.py", "fetchall"),
    "open item (key file + unseal)": ("core/steps.py", "open_item"),
    "key file read + unwrap": ("crypto/keystore.py", "load_item_key"),
    "redacted view": ("tools/reading.py", "redacted_view"),
    "search ranking (index)": ("core/search_index.py", "rank"),
    "page bodies": ("tools/search_paths.py", "page_bodies"),
    "take_page (packets)": ("search/packets.py", "take_page"),
    "take_page_json (packets, their JCS bytes)": ("search/packets.py", "take_page_json"),
    "canonical JSON": ("contract/canonical.py", "canonical_json"),
    "digests": ("contract/digests.py", "digest"),
    "audit append (call log)": ("core/call_audit.py", "finish"),
    "call log flush (fdatasync)": ("posix", "fdatasync"),
}


def _stage_times(stats: pstats.Stats, calls: int) -> dict[str, float]:
    """Cumulative ms per call of each stage (functions matched by file and name)."""
    found: dict[str, float] = {}
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (path, _line, name), (_cc, _nc, _tt, cumulative, _callers) in raw.items():
        for stage, (fragment, function) in STAGES.items():
            syscall = fragment == "posix" and function in name
            if (name == function and fragment in path) or syscall:
                found[stage] = found.get(stage, 0.0) + cumulative * 1000 / calls
    return found


def _statements(stats: pstats.Stats) -> tuple[int, int]:
    """(statements run through a Transaction, read snapshots begun)."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    statements = snapshots = 0
    for (path, _line, name), (_cc, nc, _tt, _cum, _callers) in raw.items():
        if path.endswith("store/transaction.py") and name in ("fetchall", "fetchone", "execute"):
            statements += nc
        if path.endswith("store/database.py") and name == "reading":
            snapshots += nc // 2  # a generator context manager: entered and left
    return statements, snapshots


def _profile(
    label: str, calls: list[Callable[[], Any]], top: int, dump: Path | None = None
) -> None:
    # First without the profiler: what a call costs (wall p50 and CPU per call of this
    # process, the projector's thread included), then the same calls profiled.
    plain: list[float] = []
    cpu_start = time.process_time()
    for call in calls:
        start = time.perf_counter()
        call()
        plain.append((time.perf_counter() - start) * 1000)
    plain_cpu = (time.process_time() - cpu_start) * 1000 / len(calls)
    profile = cProfile.Profile()
    walls: list[float] = []
    cpu_start = time.process_time()
    for call in calls:
        start = time.perf_counter()
        profile.enable()
        call()
        profile.disable()
        walls.append((time.perf_counter() - start) * 1000)
    cpu = (time.process_time() - cpu_start) * 1000 / len(calls)
    stats = pstats.Stats(profile)
    if dump is not None:
        stats.dump_stats(str(dump / f"{label}.prof"))
    print(f"\n== {label}: {len(calls)} calls")
    print(
        f"unprofiled: wall p50 {statistics.median(plain):.2f} ms,"
        f" p99 {sorted(plain)[int(0.99 * (len(plain) - 1))]:.2f} ms, CPU {plain_cpu:.2f} ms/call"
    )
    print(f"wall p50 {statistics.median(walls):.2f} ms (under cProfile), CPU {cpu:.2f} ms/call")
    statements, snapshots = _statements(stats)
    print(
        f"DuckDB statements per call: {statements / len(calls):.2f},"
        f" read snapshots per call: {snapshots / len(calls):.2f}"
    )
    for stage, ms in sorted(_stage_times(stats, len(calls)).items(), key=lambda kv: -kv[1]):
        print(f"  {ms:7.3f} ms  {stage}")
    stats.sort_stats("tottime").print_stats(top)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--dump", help="directory to write search.prof and get.prof into")
    args = parser.parse_args()
    workdir = Path(args.store)
    dump = None if args.dump is None else Path(args.dump)
    setup = EngramSetup.create(workdir)
    corpus = next(workdir.glob("corpus-*.jsonl"))
    texts = [q.text for q in queries(corpus, args.calls)]
    with open_service(load_config(env=setup.env)) as service:
        caller = InProcessCaller(service, HostSigningKey.from_pem_file(setup.signing_key))
        found: list[str] = []
        for text in texts[:20]:  # warm-up: caches, policy, first reads
            value = caller.call("search", {"query": text, "purpose_ref": BINDING.purpose_ref})
            found.extend(r["record"]["record_id"] for r in value["records"])
        for text in texts:
            value = caller.call("search", {"query": text, "purpose_ref": BINDING.purpose_ref})
            found.extend(r["record"]["record_id"] for r in value["records"])
        ids = list(dict.fromkeys(found))[: args.calls] or ["absent"]
        purpose = BINDING.purpose_ref
        _profile(
            "search",
            [
                lambda t=text: caller.call("search", {"query": t, "purpose_ref": purpose})
                for text in texts
            ],
            args.top,
            dump,
        )
        _profile(
            "get",
            [
                lambda r=record_id: caller.call("get", {"record_id": r, "purpose_ref": purpose})
                for record_id in ids
            ],
            args.top,
            dump,
        )
    print(f"duckdb {duckdb.__version__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
