"""How long `engram-memory` takes to start (issue 19 item 2).

Measured as a user meets it, each case a fresh interpreter: `engram-memory --help`, every
command group's `--help`, and `serve` over stdio with the embedded engine on an empty store,
from launch to its answer to `initialize` (raw JSON lines over the pipe, the wire a desktop
client speaks). The floor, measured in the same run: `python -c pass` and `python -c "import
mcp"` (the SDK `serve` cannot do without). With `--before DIR` every case also runs against
another tree's `service/` (the CLI through `PYTHONPATH`, same interpreter and dependencies),
interleaved run by run with this tree, so before and after share the sitting and its load;
that tree is copied into the run's temporary directory first, where its bytecode is cached
(it is not ours to write into). One unmeasured pass first compiles and warms every case.

    .venv/bin/python -m bench.startup --runs 10 --before /work/baseline/service
    .venv/bin/python -m bench.startup --tiny --out /tmp/startup    # CI smoke: one run each
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

from bench.report import RESULTS, box_plot, machine, machine_load

TREE = Path(__file__).resolve().parent.parent / "service"
GROUPS = ("serve", "demo", "policy", "audit", "host", "admin", "import", "gateway")
TINY_GROUPS = ("serve", "gateway")
# Issue 19's goals (ms of wall time from launch).
GOAL_HELP_MS = 300
GOAL_COMMAND_MS = 500
GOAL_INITIALIZE_MS = 1000
DEADLINE_S = 60.0
_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench-startup", "version": "0"},
    },
}


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _env(tree: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), **(extra or {})}


def _children_cpu_ms() -> float:
    """CPU (user + system) of every waited-for child so far: less swayed by the load than
    wall time, since a process waiting for a core uses none."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def _timed_run(argv: Sequence[str], env: Mapping[str, str]) -> float:
    """Milliseconds from launching `argv` to its exit (it must exit 0)."""
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def _initialize_ms(tree: Path, secrets: Mapping[str, str], data_dir: Path) -> float:
    """Milliseconds from launching `serve` (stdio, embedded engine, `data_dir` empty) to the
    line answering `initialize`; then stdin closes and the server stops."""
    env = _env(tree, {**secrets, "ENGRAM_DATA_DIR": str(data_dir)})
    command = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "stdio"]
    start = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        # Written at once: a client does not wait either, the pipe holds it until read.
        process.stdin.write(json.dumps(_INITIALIZE).encode() + b"\n")
        process.stdin.flush()
        while True:
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"serve exited ({process.wait()}) before answering")
            if json.loads(line).get("id") == 1:
                elapsed = (time.perf_counter() - start) * 1000
                break
        process.stdin.close()
        process.wait(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return elapsed


def _secrets(root: Path) -> dict[str, str]:
    """Keys as docs/operators/run.md sets them up, memory enabled."""
    from engram_memory.admin.host_setup import CHECKPOINT_KEY_FILE, init_host_dir

    root_key, _signing, public_keys = init_host_dir(root)
    return {
        "ENGRAM_ROOT_KEY": str(root_key),
        "ENGRAM_HOST_KEYS": str(public_keys),
        "ENGRAM_CHECKPOINT_KEY": str(root / CHECKPOINT_KEY_FILE),
        "ENGRAM_MEMORY_ENABLED": "true",
    }


Series = dict[str, dict[str, list[float]]]


def measure(
    runs: int, trees: Mapping[str, Path], groups: Sequence[str], work: Path
) -> tuple[Series, Series]:
    """(wall, cpu): series[group][case] = milliseconds, `runs` samples each, trees interleaved
    per run. A serve's CPU includes its stop after the answer."""
    python = sys.executable
    secrets = _secrets(work / "secrets")
    series: Series = {"floor": {}, "--help": {}, "serve": {}}
    cpu: Series = {group: {} for group in series}

    def add(group: str, case: str, timed: Callable[[], float]) -> None:
        before = _children_cpu_ms()
        wall = timed()
        cpu[group].setdefault(case, []).append(round(_children_cpu_ms() - before, 2))
        series[group].setdefault(case, []).append(round(wall, 2))

    for run in range(-1, runs):  # run -1: the warm-up, not recorded
        if run == 0:
            for recorded in (series, cpu):
                for rows in recorded.values():
                    rows.clear()
        add("floor", "python -c pass", lambda: _timed_run([python, "-c", "pass"], os.environ))
        add(
            "floor",
            "python -c 'import mcp'",
            lambda: _timed_run([python, "-c", "import mcp"], os.environ),
        )
        for label, tree in trees.items():
            cli = [python, "-m", "engram_memory.cli"]
            env = _env(tree)
            add("--help", f"{label}: --help", partial(_timed_run, [*cli, "--help"], env))
            for group in groups:
                argv = [*cli, group, "--help"]
                add("--help", f"{label}: {group} --help", partial(_timed_run, argv, env))
            data_dir = work / f"data-{label}-{run}"
            initialize = partial(_initialize_ms, tree, secrets, data_dir)
            add("serve", f"{label}: initialize", initialize)
        _progress(f"run {run + 1}/{runs} done ({machine_load()})" if run >= 0 else "warmed up")
    return series, cpu


def _summary(samples: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "min": round(min(samples), 1),
        "median": round(statistics.median(samples), 1),
        "max": round(max(samples), 1),
    }


def _goal(case: str) -> int | None:
    if case.endswith(": --help"):
        return GOAL_HELP_MS
    if case.endswith(" --help"):
        return GOAL_COMMAND_MS
    if case.endswith(": initialize"):
        return GOAL_INITIALIZE_MS
    return None


def write_results(
    series: Mapping[str, Mapping[str, Sequence[float]]],
    cpu: Mapping[str, Mapping[str, Sequence[float]]],
    command: str,
    loads: Sequence[str],
    out: Path,
) -> str:
    """Write startup.json, .md and .png to `out`; return the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    meta = machine()
    summary = {g: {c: _summary(s) for c, s in rows.items()} for g, rows in series.items()}
    cpu_summary = {g: {c: _summary(s) for c, s in rows.items()} for g, rows in cpu.items()}
    document = {"meta": {**meta, "command": command, "unit": "ms", "load": list(loads)}}
    (out / "startup.json").write_text(
        json.dumps(
            {**document, "results": summary, "cpu": cpu_summary, "samples": series}, indent=2
        )
        + "\n"
    )
    lines = [
        "# Start-up time (issue 19)",
        "",
        f"`{command}` on {meta['machine']}, Python {meta['python']}, {meta['date']}; "
        f"{loads[0]} before, {loads[-1]} after.",
        "",
        "Wall time from launch (a fresh interpreter) to exit, or for `serve` to the line "
        "answering `initialize` (stdio, embedded engine, empty store, memory enabled); "
        "CPU: user + system of the process (for `serve` including its stop), which a busy "
        "machine sways less than wall time.",
        "",
        "| group | case | n | min ms | median ms | max ms | median CPU ms | goal ms | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for group, rows in summary.items():
        for case, s in rows.items():
            goal = _goal(case) if group != "floor" else None
            met = "" if goal is None else ("yes" if s["median"] <= goal else "no")
            lines.append(
                f"| {group} | {case} | {s['n']} | {s['min']} | {s['median']} | {s['max']} "
                f"| {cpu_summary[group][case]['median']} | {goal or ''} | {met} |"
            )
    markdown = "\n".join(lines) + "\n"
    (out / "startup.md").write_text(markdown)
    box_plot(series, "engram-memory start-up", "ms", out / "startup.png")
    return markdown


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=10, help="samples per case (default 10)")
    parser.add_argument("--before", type=Path, help="another tree's service/ to measure too")
    parser.add_argument("--tiny", action="store_true", help="one run, serve and gateway only")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)
    runs = 1 if args.tiny else args.runs
    groups = TINY_GROUPS if args.tiny else GROUPS
    trees = {"after": TREE}
    loads = [machine_load()]
    _progress(f"start-up: {runs} run(s), before: {args.before or 'not measured'} ({loads[0]})")
    with tempfile.TemporaryDirectory(prefix="engram-startup-") as work:
        if args.before is not None:
            copy = Path(work) / "before"
            shutil.copytree(args.before, copy, ignore=shutil.ignore_patterns("__pycache__"))
            trees["before"] = copy
        series, cpu = measure(runs, trees, groups, Path(work))
    loads.append(machine_load())
    command = "python -m bench.startup " + " ".join(sys.argv[1:] if argv is None else argv)
    print(write_results(series, cpu, command.strip(), loads, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
