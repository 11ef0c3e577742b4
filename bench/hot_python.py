"""The Python work of a call, before and after (issue 20): CPU per call per tool, what remains.

Usage: .venv/bin/python -m bench.hot_python --before DIR [--rounds N] [--pairs N] [--out DIR]

`--before` is a checkout of the commit to compare with (`git worktree add --detach DIR main`).
Each pair runs two child processes one after the other, the before tree then this one (the
order alternates between pairs), each with its own `service/` first on `sys.path`: the same
bench code (bench/hot_path.py's rounds, in-process, embedded engine, real DuckDB file, fsync
on) measures both. CPU time is the evidence (`time.thread_time` of the calling thread around
`MemoryService.call_tool`, which survives a loaded machine better than latency); the wall
time is reported beside it.

Besides the tools, each child times the pieces this issue cut, alone (microseconds):
verifying an invocation token, one remembered policy decision with its receipt, keeping a
call's decision inputs, and canonical JSON of a capture's arguments. A last child on this
tree profiles each tool (cProfile) and splits its time into the store and the Python that
remains (canonical JSON, digests, policy, token, validation, the rest of our code).

Writes `hot_python.{json,md,png}` into --out; progress on stderr.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import RESULTS, machine_load, percentile, write_report

REPO = Path(__file__).resolve().parent.parent
TOOLS = ("capture", "request_admission", "search", "get", "forget", "withdraw")


def _child(rounds: int, profile: bool) -> dict[str, Any]:
    """Run `rounds` of bench/hot_path.py's round after a warm-up; CPU and wall per call."""
    from bench import hot_path
    from engram_memory.policy.embedded import EmbeddedWasmEngine
    from engram_memory.tools.dispatch import MemoryService

    cpu: dict[str, list[float]] = defaultdict(list)
    wall: dict[str, list[float]] = defaultdict(list)
    # CPU time of this thread, not wall time: what a loaded machine does not inflate.
    profiles: dict[str, cProfile.Profile] = defaultdict(lambda: cProfile.Profile(time.thread_time))
    measuring = [False]
    call_tool = MemoryService.call_tool

    def measured(self: MemoryService, request: Any) -> Any:
        if not measuring[0]:
            return call_tool(self, request)
        tool = request.tool.removeprefix("engram_memory_")
        profiler = profiles[tool] if profile else None
        started_cpu, started = time.thread_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        try:
            return call_tool(self, request)
        finally:
            if profiler is not None:
                profiler.disable()
            cpu[tool].append((time.thread_time() - started_cpu) * 1000)
            wall[tool].append((time.perf_counter() - started) * 1000)

    MemoryService.call_tool = measured  # type: ignore[method-assign]
    engine = EmbeddedWasmEngine()
    with tempfile.TemporaryDirectory(prefix="engram-hot-python-") as tmp:
        services = hot_path._services(Path(tmp) / "store", engine)
        caller = hot_path.Caller(MemoryService(services))
        for i in range(10):
            hot_path._round(caller, None, -i - 1)
        measuring[0] = True
        for i in range(rounds):
            hot_path._round(caller, None, i)
        measuring[0] = False
        services.database.close()
    engine.close()
    out: dict[str, Any] = {"cpu": dict(cpu), "wall": dict(wall), "pieces": _pieces()}
    if profile:
        out["profile"] = {tool: _split(p, len(cpu[tool])) for tool, p in profiles.items()}
    return out


def _pieces() -> dict[str, float]:
    """Microseconds of CPU per piece this issue cut, each alone (median of 5 batches)."""
    from engram_memory.client.demo import demo_capture_arguments
    from engram_memory.contract.canonical import canonical_json, normalize
    from engram_memory.core.decision_keeping import kept_decisions
    from engram_memory.host.context import mint_invocation, verify_invocation
    from engram_memory.host.keys import HostKeyring, HostSigningKey
    from engram_memory.policy.decider import PolicyDecider, Subject
    from engram_memory.policy.embedded import EmbeddedWasmEngine

    engine = EmbeddedWasmEngine()
    decider = PolicyDecider(engine, engine.identity, lambda: time.time_ns() // 1_000_000)
    subject = Subject("acme", "support", "user:alice", "agent:b", "purpose:p", "host:b")
    signer = HostSigningKey.generate()
    ring = HostKeyring({signer.kid: signer.private_key.public_key()})
    token = mint_invocation(
        signer,
        host_id="host:b",
        tenant="acme",
        workspace="support",
        principal="user:alice",
        agent_id="agent:b",
        session="session:b",
        purpose_ref="purpose:p",
        audit_id=f"audit:{uuid.uuid4().hex}",
    )
    decisions = [decider.authz(subject, "engram_memory_capture").decision for _ in range(5)]
    arguments = normalize(demo_capture_arguments("Refund approved after courier loss.", "k"))
    pieces: dict[str, Callable[[], object]] = {
        "verify invocation token": lambda: verify_invocation(token, ring, time.time()),
        "policy decision (remembered) + receipt": lambda: decider.authz(
            subject, "engram_memory_capture"
        ),
        "keep a call's 5 decision inputs": lambda: kept_decisions(decisions, 90),
        "canonical JSON of capture arguments": lambda: canonical_json(arguments),
    }
    timings = {name: _micro(fn) for name, fn in pieces.items()}
    engine.close()
    return timings


def _micro(fn: Callable[[], object], batch: int = 400) -> float:
    fn()
    batches = []
    for _ in range(5):
        start = time.thread_time()
        for _ in range(batch):
            fn()
        batches.append((time.thread_time() - start) / batch * 1e6)
    return round(sorted(batches)[2], 1)


def _category(filename: str, function: str) -> str:
    if "/store/" in filename or "duckdb" in filename or "duckdb" in function:
        return "store (DuckDB, call log)"
    if "posix." in function or "io.open" in function or "pathlib" in filename:
        return "files (fsync, key files, anchor)"
    if "opapywasm" in filename or "wasmtime" in filename:
        return "policy engine (Wasm)"
    if "/policy/" in filename:
        return "policy decider + receipts"
    if "/host/" in filename or "/jwt/" in filename or "ed25519" in function:
        return "token verification"
    if "canonical.py" in filename or "/json/" in filename or "rfc8785" in filename:
        return "canonical JSON"
    if "digests.py" in filename or "sha256" in function or "_hashlib" in function:
        return "digests"
    if "pydantic" in filename or "validate_python" in function or "parsing.py" in filename:
        return "argument + result validation"
    if "secret" in filename or "classif" in filename:
        return "never-store scan + classifiers"
    if "engram_memory" in filename:
        return "rest of our code"
    return "interpreter + stdlib"


def _split(profiler: cProfile.Profile, calls: int) -> dict[str, float]:
    """Profiled CPU ms per call by category (own time of each function)."""
    totals: dict[str, float] = defaultdict(float)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (filename, _line, function), (_cc, _nc, own, _cum, _callers) in stats.items():
        totals[_category(filename, function)] += own
    return {name: round(seconds * 1000 / max(calls, 1), 3) for name, seconds in totals.items()}


def _run_child(tree: Path, rounds: int, profile: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{tree / 'service'}{os.pathsep}{REPO}"}
    command = [sys.executable, "-m", "bench.hot_python", "--child", "--rounds", str(rounds)]
    if profile:
        command.append("--profile")
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child on {tree} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _median(values: list[float]) -> float:
    return round(percentile(values, 0.5), 3)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, help="checkout of the commit to compare with")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.rounds, args.profile)))
        return 0
    if args.before is None:
        parser.error("--before is required")
    load_before = machine_load()
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for pair in range(args.pairs):
        order = [("before", args.before), ("after", REPO)]
        for label, tree in order if pair % 2 == 0 else order[::-1]:
            print(f"pair {pair + 1}: {label} ({machine_load()})", file=sys.stderr, flush=True)
            runs[label].append(_run_child(tree, args.rounds, profile=False))
    print("profile of what remains (this tree)", file=sys.stderr, flush=True)
    profile = _run_child(REPO, max(args.rounds // 3, 20), profile=True)["profile"]
    cpu = {
        label: {tool: [ms for run in done for ms in run["cpu"][tool]] for tool in TOOLS}
        for label, done in runs.items()
    }
    wall = {
        label: {tool: [ms for run in done for ms in run["wall"][tool]] for tool in TOOLS}
        for label, done in runs.items()
    }
    pieces = {
        label: {name: _median([run["pieces"][name] for run in done]) for name in done[0]["pieces"]}
        for label, done in runs.items()
    }
    saved = {
        tool: round(_median(cpu["before"][tool]) - _median(cpu["after"][tool]), 3) for tool in TOOLS
    }
    command = (
        f"python -m bench.hot_python --before {args.before} --rounds {args.rounds}"
        f" --pairs {args.pairs}"
    )
    series = {f"CPU per call, {label}": {tool: cpu[label][tool] for tool in TOOLS} for label in cpu}
    series.update(
        {f"wall per call, {label}": {tool: wall[label][tool] for tool in TOOLS} for label in wall}
    )
    markdown = (
        write_report(
            "hot_python",
            "The Python work of a call: CPU per call per tool, before and after (in-process)",
            command,
            series,
            "ms",
            Path(args.out),
            extra={
                "CPU p50 saved per call (ms)": saved,
                "pieces, µs CPU each (before)": pieces["before"],
                "pieces, µs CPU each (after)": pieces["after"],
                "profile of what remains, profiled ms per call by category (after)": profile,
                "machine load before": load_before,
                "machine load after": machine_load(),
            },
        )
        + _remains_table(profile, {tool: _median(cpu["after"][tool]) for tool in TOOLS})
        + _pieces_table(pieces)
    )
    (Path(args.out) / "hot_python.md").write_text(markdown)
    print(markdown)
    return 0


_NOT_PYTHON = ("store (DuckDB, call log)", "files (fsync, key files, anchor)")


def _remains_table(profile: dict[str, dict[str, float]], cpu_p50: dict[str, float]) -> str:
    """What remains per tool (profiled CPU ms per call by category), and the Python floor:
    the unprofiled CPU p50 less what the profile puts in the store and files (their time is
    in C, which profiling inflates little; Python's own is inflated, so its profiled sum is
    an upper bound)."""
    categories = sorted({name for split in profile.values() for name in split})
    lines = [
        "",
        "## What remains per call (after), profiled CPU ms per call by category",
        "",
        "| category | " + " | ".join(TOOLS) + " |",
        "|---|" + "---|" * len(TOOLS),
    ]
    for name in categories:
        cells = [f"{profile.get(tool, {}).get(name, 0.0):.2f}" for tool in TOOLS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    python = {
        tool: sum(ms for name, ms in profile.get(tool, {}).items() if name not in _NOT_PYTHON)
        for tool in TOOLS
    }
    outside = {
        tool: sum(ms for name, ms in profile.get(tool, {}).items() if name in _NOT_PYTHON)
        for tool in TOOLS
    }
    lines.append(
        "| **Python, profiled (upper bound)** | "
        + " | ".join(f"{python[tool]:.2f}" for tool in TOOLS)
        + " |"
    )
    lines.append(
        "| **Python floor: CPU p50 − store − files** | "
        + " | ".join(f"{max(cpu_p50[tool] - outside[tool], 0.0):.2f}" for tool in TOOLS)
        + " |"
    )
    return "\n".join(lines) + "\n"


def _pieces_table(pieces: dict[str, dict[str, float]]) -> str:
    lines = [
        "",
        "## The pieces cut, each alone (µs CPU, median of runs)",
        "",
        "| piece | before | after |",
        "|---|---|---|",
    ]
    for name, before in pieces["before"].items():
        lines.append(f"| {name} | {before} | {pieces['after'][name]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
