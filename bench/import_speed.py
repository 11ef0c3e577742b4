"""`engram-memory import` throughput: lines/s loading a corpus, beside the floor of the run.

Usage: .venv/bin/python -m bench.import_speed --corpus FILE [--batch 500] [--workers 2]
       [--out DIR] [--label TEXT] [--keep DIR] [--serve-searches N]

The corpus is the import's JSONL (e.g. `python -m bench.corpus --records 10000 --out FILE`).
Runs the real CLI (`engram-memory import`, embedded engine, fresh data directory) and keeps
each progress line with its time and the CPU seconds the import process and its worker
processes (`--workers`, bulk/pool.py) spent, then `audit verify`. The floor, measured in the
same run:
DuckDB `SELECT 1` and a one-row INSERT on the store, one embedded policy decision, and how
many statements and policy decisions one line costs (counted in-process over the corpus's
first 200 lines). With `--serve-searches N`, `serve` is then started on the loaded store:
seconds from launch to its first answered search, RSS then and after N searches
(bench/serve_ready.py). `--keep DIR` loads into DIR (kept) instead of a temporary directory.
Writes `import_speed.{json,md,png}`, keeping the earlier runs found there beside the new one
(each under its `--label`); progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import RESULTS, machine, machine_load, percentile
from engram_memory.admin.host_setup import CHECKPOINT_KEY_FILE, init_host_dir
from engram_memory.bulk import DEFAULT_WORKERS
from engram_memory.bulk.importer import ImportBinding, Importer
from engram_memory.cli.bulk_import import numbered_lines
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider, Subject
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.database import Database
from engram_memory.store.transaction import Transaction

# The shipped policy's globex/main (as bench/search_engram.py): carol is its steward, gina
# holds `maintain`, and admission accepts `evidence:ticket/` whatever the component kinds.
BINDING = ("globex", "main", "user:carol", "purpose:support-case")
OPERATOR = "human:gina"
_PROGRESS = re.compile(r"^import: (\d+)/(\d+) lines committed")
_COUNTED = ("execute", "executemany", "fetchall", "fetchone")
GOAL_LINES_PER_S = 550  # issue 20: 100k lines in 3 minutes


def _say(text: str) -> None:
    print(f"import_speed: {text}", file=sys.stderr, flush=True)


def _children_cpu_s() -> float:
    """CPU seconds of the waited-for children (the import and, through it, its workers)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _run_cli(
    corpus: Path, work: Path, batch: int, workers: int, serve_searches: int
) -> dict[str, Any]:
    root, signing, public = init_host_dir(work / "secrets")
    data = work / "data"
    env = {
        **os.environ,
        "ENGRAM_DATA_DIR": str(data),
        "ENGRAM_ROOT_KEY": str(root),
        "ENGRAM_HOST_KEYS": str(public),
        # As `serve` gets it (server_env): the import signs a checkpoint at its end, from
        # which the next start verifies the audit trail.
        "ENGRAM_CHECKPOINT_KEY": str(root.parent / CHECKPOINT_KEY_FILE),
    }
    tenant, workspace, principal, purpose = BINDING
    command = [sys.executable, "-m", "engram_memory.cli", "import", "--tenant", tenant]
    command += ["--workspace", workspace, "--principal", principal, "--purpose", purpose]
    command += ["--operator", OPERATOR, "--batch", str(batch), "--workers", str(workers)]
    command.append(str(corpus))
    points: list[tuple[float, int]] = [(0.0, 0)]
    cpu_before = _children_cpu_s()
    started = time.monotonic()
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        assert process.stderr is not None
        assert process.stdout is not None
        for line in process.stderr:
            match = _PROGRESS.match(line)
            if match:
                points.append((time.monotonic() - started, int(match.group(1))))
                _say(line.strip())
        output = process.stdout.read()
    elapsed = time.monotonic() - started
    cpu_s = _children_cpu_s() - cpu_before  # the import exited: its workers were joined
    verify = [sys.executable, "-m", "engram_memory.cli", "audit", "verify", "--data-dir"]
    verified = subprocess.run(
        [*verify, str(data), "--root-key", str(root)], env=env, capture_output=True, text=True
    )
    size = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
    summary = json.loads(output)["value"] if process.returncode == 0 else {}
    lines = int(summary.get("lines", 0))
    served: dict[str, Any] = {}
    if serve_searches and process.returncode == 0:
        from bench.serve_ready import measure
        from engram_memory.client.reference_host import server_env

        _say(f"serving the store: ready time, RSS, {serve_searches} searches")
        extra = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
        serve_env = server_env(data, root, public, **extra)
        served = measure(serve_env, signing, work / "serve.log", serve_searches)
        _say(f"served {served}")
    return {
        "served": served,
        "exit": process.returncode,
        "summary": summary,
        "seconds": round(elapsed, 2),
        "lines_per_s": round(lines / elapsed, 2) if elapsed else 0.0,
        "workers": workers,
        "cpu_s": round(cpu_s, 1),
        "cpu_ms_per_line": round(cpu_s * 1000 / lines, 2) if lines else 0.0,
        "progress": points,
        "audit_verify": verified.stdout.strip() or verified.stderr.strip(),
        "data_dir_bytes_per_line": round(size / lines) if lines else 0,
    }


def _timed(action: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return round(percentile(samples, 0.5), 3)


def _floor(corpus: Path, work: Path, engine: EmbeddedWasmEngine) -> dict[str, Any]:
    """Per-statement and per-decision costs, and what one line spends of each."""
    data = work / "floor"
    services = Services(
        database=Database.open(data),
        keys=KeyStore(data / KEYS_DIRECTORY),
        decider=PolicyDecider(engine, engine.identity, lambda: time.time_ns() // 1_000_000),
        root_key=RootKey(os.urandom(32)),
        host_keys=HostKeyring({}),
        settings=ServiceSettings(host_memory_enabled=True),
    )
    counts = {"statements": 0, "decisions": 0}
    spent = {"statements": 0.0, "decisions": 0.0}
    originals = {name: getattr(Transaction, name) for name in _COUNTED}
    decide = PolicyDecider._decide

    def counted(name: str) -> Callable[..., Any]:
        def wrapper(self: Transaction, *args: Any, **kwargs: Any) -> Any:
            counts["statements"] += 1
            start = time.perf_counter()
            try:
                return originals[name](self, *args, **kwargs)
            finally:
                spent["statements"] += time.perf_counter() - start

        return wrapper

    def counted_decision(self: PolicyDecider, *args: Any, **kwargs: Any) -> Any:
        counts["decisions"] += 1
        start = time.perf_counter()
        try:
            return decide(self, *args, **kwargs)
        finally:
            spent["decisions"] += time.perf_counter() - start

    lines = list(numbered_lines(corpus))[:200]
    tenant, workspace, principal, purpose = BINDING
    binding = ImportBinding(tenant, workspace, principal, purpose, "import:floor")
    for name in _COUNTED:
        setattr(Transaction, name, counted(name))
    PolicyDecider._decide = counted_decision  # type: ignore[method-assign]
    started = time.perf_counter()
    try:
        Importer(services, binding, lambda _line: None).run(iter(lines), len(lines), 500)
    finally:
        for name, original in originals.items():
            setattr(Transaction, name, original)
        PolicyDecider._decide = decide  # type: ignore[method-assign]
    agents = iter(range(10**9))

    def one_decision() -> object:
        # A new agent id each time: the decider remembers answers to identical inputs.
        subject = Subject(
            tenant=tenant,
            workspace=workspace,
            principal=principal,
            agent_id=f"agent:bench-{next(agents)}",
            purpose_ref=purpose,
            host_id="host:bench",
        )
        return services.decider.authz(subject, "engram_memory_capture")

    total = time.perf_counter() - started
    floor = {
        "in_process_lines_per_s": round(len(lines) / total, 1),
        "ms_per_line_in_statements": round(spent["statements"] * 1000 / len(lines), 2),
        "ms_per_line_in_policy": round(spent["decisions"] * 1000 / len(lines), 2),
        "ms_per_line_total": round(total * 1000 / len(lines), 2),
        "statements_per_line": round(counts["statements"] / len(lines), 1),
        "policy_decisions_per_line": round(counts["decisions"] / len(lines), 1),
        "duckdb_select_1_ms_p50": 0.0,
        "duckdb_one_row_insert_ms_p50": 0.0,
        "policy_decision_ms_p50": _timed(one_decision, 200),
    }
    serial = iter(range(10**9))
    with services.database.transaction() as tx:
        floor["duckdb_select_1_ms_p50"] = _timed(lambda: tx.fetchone("SELECT 1"), 300)
        floor["duckdb_one_row_insert_ms_p50"] = _timed(
            lambda: tx.execute(
                "INSERT INTO consumed_confirmations (jti, scope_ref, tool, consumed_at_ms)"
                " VALUES (?, 'bench', 'bench', 0)",
                [f"bench-{next(serial)}"],
            ),
            300,
        )
        tx.execute("DELETE FROM consumed_confirmations WHERE scope_ref = 'bench'")
    services.database.close()
    return floor


def _plot(runs: list[dict[str, Any]], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    longest = 0.0
    for entry in runs:
        progress = entry["run"]["progress"]
        seconds = [p[0] for p in progress]
        longest = max(longest, seconds[-1])
        ax.plot(seconds, [p[1] for p in progress], marker=".", label=_label(entry))
    reach = min(longest, 100_000 / GOAL_LINES_PER_S)  # the goal line stops at 100k lines
    ax.plot([0, reach], [0, reach * GOAL_LINES_PER_S], linestyle="--",
            label=f"goal: 100k lines in 3 min ({GOAL_LINES_PER_S} lines/s)")  # fmt: skip
    title = "engram-memory import: lines committed over time"
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("lines committed")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(target, dpi=120)
    plt.close(fig)


def _label(entry: dict[str, Any]) -> str:
    meta = entry["meta"]
    return str(meta.get("label") or f"{meta['date']} batch {meta['command'].split()[-1]}")


def _earlier_runs(path: Path) -> list[dict[str, Any]]:
    """The runs already recorded in `path` (a file of the one-run format is one run)."""
    if not path.is_file():
        return []
    recorded: dict[str, Any] = json.loads(path.read_text())
    if "runs" in recorded:
        return list(recorded["runs"])
    recorded["meta"].setdefault("label", "one-row statements (before issue 20)")
    return [recorded]


def _markdown(runs: list[dict[str, Any]]) -> list[str]:
    """One table, a column per run, newest last."""

    def row(name: str, values: list[object]) -> str:
        return f"| {name} | " + " | ".join(str(v) for v in values) + " |"

    def served(key: str) -> list[object]:
        return [r["run"].get("served", {}).get(key, "-") for r in runs]

    floors = [r["floor"] for r in runs]
    table = [
        row("measure", [_label(r) for r in runs]),
        "|---|" + "---|" * len(runs),
        row("command", [f"`{r['meta']['command']}`" for r in runs]),
        row("corpus", [f"`{r['meta'].get('corpus_command', '')}`" for r in runs]),
        row(
            "date, load before / after",
            [f"{r['meta']['date']}, {r['meta']['load_before']} / {r['load_after']}" for r in runs],
        ),
        row("lines (outcomes)", [json.dumps(r["run"]["summary"]) for r in runs]),
        row("wall time", [f"{r['run']['seconds']} s" for r in runs]),
        row(
            f"**throughput** (goal ≥ {GOAL_LINES_PER_S} lines/s)",
            [f"**{r['run']['lines_per_s']} lines/s**" for r in runs],
        ),
        row("worker processes (`--workers`)", [r["run"].get("workers", "-") for r in runs]),
        row(
            "CPU ms per line, import process + its workers",
            [r["run"].get("cpu_ms_per_line", "-") for r in runs],
        ),
        row("data directory per line", [f"{r['run']['data_dir_bytes_per_line']} B" for r in runs]),
        row("audit verify", [r["run"]["audit_verify"] for r in runs]),
        row("in-process, first 200 lines: lines/s", [f["in_process_lines_per_s"] for f in floors]),
        row(
            "in-process ms per line: total / DuckDB statements / policy",
            [
                f"{f['ms_per_line_total']} / {f['ms_per_line_in_statements']} / "
                f"{f['ms_per_line_in_policy']}"
                for f in floors
            ],
        ),
        row("statements per line", [f["statements_per_line"] for f in floors]),
        row("policy decisions per line", [f["policy_decisions_per_line"] for f in floors]),
        row("floor: DuckDB `SELECT 1` p50 ms", [f["duckdb_select_1_ms_p50"] for f in floors]),
        row("floor: one-row INSERT p50 ms", [f["duckdb_one_row_insert_ms_p50"] for f in floors]),
        row("floor: one policy decision p50 ms", [f["policy_decision_ms_p50"] for f in floors]),
        row(
            "`serve` ready (launch to first search answered; goal ≤ 3 s)",
            [f"{v} s" if v != "-" else v for v in served("ready_s")],
        ),
        row("RSS when ready (goal ≤ 500 MiB)", served("rss_ready_mib")),
        row(
            "searches, then RSS (MiB)",
            [
                f"{n}, {m}" if n != "-" else n
                for n, m in zip(served("searches"), served("rss_after_searches_mib"), strict=True)
            ],
        ),
        row("search p50 ms over stdio", served("search_ms_p50")),
    ]
    return ["# engram-memory import throughput", "", *table]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", required=True, help="JSONL of capture arguments")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument(
        "--corpus-command", default="", help="how the corpus was made, for the report"
    )
    parser.add_argument("--label", default="", help="the run's name in the report")
    parser.add_argument("--keep", default="", help="load into this directory and keep it")
    parser.add_argument("--serve-searches", type=int, default=0)
    args = parser.parse_args()
    corpus, out = Path(args.corpus), Path(args.out)
    command = f"python -m bench.import_speed --corpus {corpus.name} --batch {args.batch}"
    command += f" --workers {args.workers}"
    if args.serve_searches:
        command += f" --serve-searches {args.serve_searches}"
    load_before = machine_load()
    with tempfile.TemporaryDirectory(prefix="import-speed-") as scratch:
        work = Path(args.keep) if args.keep else Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        _say("measuring the floor")
        engine = EmbeddedWasmEngine()
        try:
            floor = _floor(corpus, Path(scratch), engine)
        finally:
            engine.close()
        _say(f"floor {floor}")
        run = _run_cli(corpus, work, args.batch, args.workers, args.serve_searches)
    meta: dict[str, str] = {
        **machine(),
        "command": command,
        "corpus_command": args.corpus_command,
        "load_before": load_before,
        "label": args.label,
    }
    result: dict[str, Any] = {
        "meta": meta,
        "run": run,
        "floor": floor,
        "load_after": machine_load(),
    }
    out.mkdir(parents=True, exist_ok=True)
    runs = [*_earlier_runs(out / "import_speed.json"), result]
    (out / "import_speed.json").write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    (out / "import_speed.md").write_text("\n".join(_markdown(runs)) + "\n")
    _plot(runs, out / "import_speed.png")
    _say(f"wrote {out}/import_speed.{{json,md,png}}")
    return 0 if run["exit"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
