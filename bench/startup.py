"""How long `engram-memory` takes to start (issue 19 item 2).

Measured as a user meets it, each case a fresh interpreter: `engram-memory --help`, every
command group's `--help`, and `serve` over stdio with the embedded engine on an empty store,
from launch to its answer to `initialize` (raw JSON lines over the pipe, the wire a desktop
client speaks). The floor, measured in the same run: `python -c pass` and `python -c "import
mcp"` (the SDK `serve` cannot do without). With `--before DIR` every case also runs against
another tree's `service/` (the CLI through `PYTHONPATH`, same interpreter and dependencies),
interleaved run by run with this tree, so before and after share the sitting and its load;
that tree's bytecode is cached under the run's temporary directory (it is not ours to write
into). One unmeasured pass first compiles and warms every case.

    .venv/bin/python -m bench.startup --runs 10 --before /work/baseline/service
    .venv/bin/python -m bench.startup --tiny --out /tmp/startup    # CI smoke: one run each
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
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


_PYCACHE: dict[Path, str] = {}  # a tree other than ours -> where its bytecode is cached


def _env(tree: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), **(extra or {})}
    if tree in _PYCACHE:
        env["PYTHONPYCACHEPREFIX"] = _PYCACHE[tree]
    return env


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
    """Keys as README's Host integration section sets them up, memory enabled."""
    from engram_memory.admin.host_setup import CHECKPOINT_KEY_FILE, init_host_dir

    root_key, _signing, public_keys = init_host_dir(root)
    return {
        "ENGRAM_ROOT_KEY": str(root_key),
        "ENGRAM_HOST_KEYS": str(public_keys),
        "ENGRAM_CHECKPOINT_KEY": str(root / CHECKPOINT_KEY_FILE),
        "ENGRAM_MEMORY_ENABLED": "true",
    }


def measure(
    runs: int, trees: Mapping[str, Path], groups: Sequence[str], work: Path
) -> dict[str, dict[str, list[float]]]:
    """series[group][case] = milliseconds, `runs` samples each, trees interleaved per run."""
    python = sys.executable
    secrets = _secrets(work / "secrets")
    series: dict[str, dict[str, list[float]]] = {"floor": {}, "--help": {}, "serve": {}}

    def add(group: str, case: str, value: float) -> None:
        series[group].setdefault(case, []).append(round(value, 2))

    for tree in trees.values():
        if tree != TREE:
            _PYCACHE[tree] = str(work / "pycache")
    for run in range(-1, runs):  # run -1: the warm-up, not recorded
        if run == 0:
            series = {group: {} for group in series}
        add("floor", "python -c pass", _timed_run([python, "-c", "pass"], os.environ))
        add("floor", "python -c 'import mcp'", _timed_run([python, "-c", "import mcp"], os.environ))
        for label, tree in trees.items():
            cli = [python, "-m", "engram_memory.cli"]
            add("--help", f"{label}: --help", _timed_run([*cli, "--help"], _env(tree)))
            for group in groups:
                argv = [*cli, group, "--help"]
                add("--help", f"{label}: {group} --help", _timed_run(argv, _env(tree)))
            data_dir = work / f"data-{label}-{run}"
            add("serve", f"{label}: initialize", _initialize_ms(tree, secrets, data_dir))
        _progress(f"run {run + 1}/{runs} done ({machine_load()})" if run >= 0 else "warmed up")
    return series


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
    command: str,
    loads: Sequence[str],
    out: Path,
) -> str:
    """Write startup.json, .md and .png to `out`; return the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    meta = machine()
    summary = {g: {c: _summary(s) for c, s in rows.items()} for g, rows in series.items()}
    document = {"meta": {**meta, "command": command, "unit": "ms", "load": list(loads)}}
    (out / "startup.json").write_text(
        json.dumps({**document, "results": summary, "samples": series}, indent=2) + "\n"
    )
    lines = [
        "# Start-up time (issue 19)",
        "",
        f"`{command}` on {meta['machine']}, Python {meta['python']}, {meta['date']}; "
        f"{loads[0]} before, {loads[-1]} after.",
        "",
        "Wall time from launch (a fresh interpreter) to exit, or for `serve` to the line "
        "answering `initialize` (stdio, embedded engine, empty store, memory enabled).",
        "",
        "| group | case | n | min ms | median ms | max ms | goal ms | met (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for group, rows in summary.items():
        for case, s in rows.items():
            goal = _goal(case) if group != "floor" else None
            met = "" if goal is None else ("yes" if s["median"] <= goal else "no")
            lines.append(
                f"| {group} | {case} | {s['n']} | {s['min']} | {s['median']} | {s['max']} "
                f"| {goal or ''} | {met} |"
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
    trees = {"after": TREE} if args.before is None else {"after": TREE, "before": args.before}
    loads = [machine_load()]
    _progress(f"start-up: {runs} run(s), trees {', '.join(trees)} ({loads[0]})")
    with tempfile.TemporaryDirectory(prefix="engram-startup-") as work:
        series = measure(runs, trees, groups, Path(work))
    loads.append(machine_load())
    command = "python -m bench.startup " + " ".join(sys.argv[1:] if argv is None else argv)
    print(write_results(series, command.strip(), loads, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
