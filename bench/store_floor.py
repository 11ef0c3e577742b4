"""The floor under the hot path: what the store engine, the disk and the policy engine cost per
call on this machine, and how many of each a call of every tool spends.

Usage: .venv/bin/python -m bench.store_floor [--rounds N] [--out DIR]

Measures, in one process, on a real DuckDB file and key directory:

- DuckDB 2.0.1 from Python: `SELECT 1`; a point lookup by an indexed key of the real schema; a
  one-row INSERT inside a transaction; BEGIN + one-row INSERT + COMMIT (the WAL's fsync);
- the disk: an item key written and fsynced (KeyStore), the head anchor's slot (fdatasync);
- the embedded policy engine: one evaluation, remembered (memo) and not;
- per tool, through `MemoryService.call_tool` on the assembled service (as `bench.hot_path`):
  how many statements and write transactions one call runs, and where its mean time goes:
  inside DuckDB statements, in COMMIT and the anchor write after it, and everything else
  (policy, crypto, key files, validation, serialization), so a tool's latency can be read
  against what the engine allows.

Writes `store_floor.{json,md,png}` into --out; progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.hot_path import Caller, _round, _services
from bench.report import RESULTS, machine_load, write_report
from engram_memory.crypto.keys import RootKey
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.anchors import AnchorFile
from engram_memory.store.database import Database
from engram_memory.store.projection import Projection
from engram_memory.store.transaction import Transaction
from engram_memory.store.transaction import Transaction as TransactionClass
from engram_memory.tools.dispatch import MemoryService

_STATEMENT_METHODS = ("execute", "executemany", "fetchall", "fetchone")
BACKGROUND = "(background projector)"


def _timed(samples: list[float], action: Callable[[], object], rounds: int) -> list[float]:
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _engine_floor(data_dir: Path, rounds: int) -> dict[str, list[float]]:
    """DuckDB statement and commit costs on a store with the real schema."""
    database = Database.open(data_dir)
    samples: dict[str, list[float]] = defaultdict(list)
    serial = iter(range(10**9))

    @contextmanager
    def writing() -> Iterator[Transaction]:
        with database.transaction() as tx:
            yield tx

    def select_one() -> None:
        with database.reading() as tx:
            tx.fetchone("SELECT 1")

    def point_lookup() -> None:
        with database.reading() as tx:
            tx.fetchall("SELECT record_id FROM records WHERE record_id = ?", ["mem_absent"])

    def insert_row(tx: Transaction) -> None:
        n = next(serial)
        tx.execute(
            "INSERT INTO consumed_confirmations (jti, scope_ref, tool, consumed_at_ms) "
            "VALUES (?, 'bench', 'bench', ?)",
            [f"bench-{n}", n],
        )

    def insert_in_open_tx() -> None:
        with writing() as tx:
            start = time.perf_counter()
            insert_row(tx)
            samples["one-row INSERT inside a transaction"].append(
                (time.perf_counter() - start) * 1000
            )

    def write_commit() -> None:
        with writing() as tx:
            insert_row(tx)

    _timed(samples["SELECT 1 on a read snapshot"], select_one, rounds)
    _timed(samples["point lookup by indexed key (snapshot)"], point_lookup, rounds)
    for _ in range(rounds):
        insert_in_open_tx()
    _timed(samples["BEGIN + one-row INSERT + COMMIT (WAL fsync)"], write_commit, rounds)
    database.close()
    return samples


def _disk_and_policy_floor(services: Any, rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = defaultdict(list)
    keys, root = services.keys, services.root_key
    serial = iter(range(10**9))

    def key_file() -> None:
        item = f"item-{next(serial)}"
        keys.store_item_key(root, "tenant:bench/workspace:floor", item, os.urandom(32))

    _timed(samples["item key file written + fsync"], key_file, rounds)
    anchor_dir = Path(tempfile.mkdtemp(prefix="engram-floor-anchor-"))
    anchor = AnchorFile(anchor_dir, os.urandom(32))
    heads = services.database.heads()[1]
    _timed(samples["head anchor slot written + fdatasync"], lambda: anchor.write(heads), rounds)
    subject_input = {
        "tenant": "acme",
        "workspace": "support",
        "principal": "user:alice",
        "agent_id": "agent:bench",
        "purpose_ref": "purpose:support-case",
        "host_id": "host:bench",
        "tool": "engram_memory_get",
    }
    fresh = EmbeddedWasmEngine(memo_entries=0)
    remembering = EmbeddedWasmEngine()
    path = "engram/authz/decision"
    _timed(samples["policy evaluation (Wasm)"], lambda: fresh.evaluate(path, subject_input), rounds)
    _timed(
        samples["policy evaluation (remembered)"],
        lambda: remembering.evaluate(path, subject_input),
        rounds,
    )
    fresh.close()
    remembering.close()
    return samples


class StoreTimer:
    """Per tool: statements run and the time inside them, write transactions and the time of
    their COMMIT (with the anchor write that follows it). Benchmark-only instrument.

    A projection of the call log (store/projection.py) is counted for the call that ran it
    (a mutation's transaction projects the reads logged before it, in that transaction), and
    its statements as that call's: what the log saves a read is paid there, and shown. What
    the background projector (store/projector.py) runs is counted apart, as `BACKGROUND`.
    """

    def __init__(self, database: Database) -> None:
        self.tool = ""
        self.statements: dict[str, int] = defaultdict(int)
        self.statement_ms: dict[str, float] = defaultdict(float)
        self.transactions: dict[str, int] = defaultdict(int)
        self.commit_ms: dict[str, float] = defaultdict(float)
        self.projections: dict[str, int] = defaultdict(int)
        self._originals = {name: getattr(TransactionClass, name) for name in _STATEMENT_METHODS}
        for name, original in self._originals.items():
            setattr(TransactionClass, name, self._timing(original))
        inner = database.transaction

        @contextmanager
        def timed() -> Iterator[Transaction]:
            with inner() as tx:
                yield tx
                body_done = time.perf_counter()
            if tx.wrote:
                self.transactions[self.tool] += 1
                self.commit_ms[self.tool] += (time.perf_counter() - body_done) * 1000

        database.transaction = timed  # type: ignore[method-assign]
        self._write_pending = Projection.write_pending
        write_pending = self._write_pending

        def projecting(projection: Projection, tx: Transaction) -> int | None:
            position = write_pending(projection, tx)
            if position is not None:
                self.projections[self._counted_as()] += 1
            return position

        Projection.write_pending = projecting  # type: ignore[method-assign]

    def _timing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def timing(tx: Transaction, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(tx, *args, **kwargs)
            finally:
                tool = self._counted_as()
                self.statements[tool] += 1
                self.statement_ms[tool] += (time.perf_counter() - start) * 1000

        return timing

    def _counted_as(self) -> str:
        """The tool being called, or BACKGROUND on any other thread than the caller's."""
        return self.tool if threading.current_thread() is threading.main_thread() else BACKGROUND

    def restore(self) -> None:
        for name, original in self._originals.items():
            setattr(TransactionClass, name, original)
        Projection.write_pending = self._write_pending  # type: ignore[method-assign]


def _per_tool(services: Any, rounds: int) -> tuple[dict[str, list[float]], StoreTimer]:
    caller = Caller(MemoryService(services))
    for i in range(5):
        _round(caller, None, -i - 1)
    counter = StoreTimer(services.database)
    timed = caller.timed

    def tracking(samples: Any, tool: str, *args: Any, **kwargs: Any) -> Any:
        counter.tool = tool  # a round's second, unsampled capture counts as a capture too
        return timed(samples, tool, *args, **kwargs)

    caller.timed = tracking  # type: ignore[method-assign]
    samples: dict[str, list[float]] = defaultdict(list)
    for i in range(rounds):
        _round(caller, samples, i)
    counter.restore()
    return samples, counter


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    load_before = machine_load()
    engine = EmbeddedWasmEngine()
    with tempfile.TemporaryDirectory(prefix="engram-floor-") as tmp:
        workdir = Path(tmp)
        print("store engine floor", file=sys.stderr, flush=True)
        engine_floor = _engine_floor(workdir / "engine", args.rounds * 3)
        services = _services(workdir / "main", engine, RootKey(os.urandom(32)))
        print("disk and policy floor", file=sys.stderr, flush=True)
        disk_policy = _disk_and_policy_floor(services, args.rounds * 3)
        print(f"per tool, {args.rounds} rounds", file=sys.stderr, flush=True)
        tools, counter = _per_tool(services, args.rounds)
        services.database.close()
    engine.close()
    per_call: dict[str, dict[str, float]] = {}
    for tool, samples in tools.items():
        calls = args.rounds * (2 if tool == "capture" else 1)  # _round captures twice
        mean_ms = sum(samples) / len(samples)
        statement_ms = counter.statement_ms[tool] / calls
        commit_ms = counter.commit_ms[tool] / calls
        per_call[tool] = {
            "statements": round(counter.statements[tool] / calls, 1),
            "write transactions": round(counter.transactions[tool] / calls, 2),
            "call log projections": round(counter.projections[tool] / calls, 2),
            "mean ms": round(mean_ms, 1),
            "in statements ms": round(statement_ms, 1),
            "in COMMIT + anchor ms": round(commit_ms, 1),
            "everything else ms": round(mean_ms - statement_ms - commit_ms, 1),
        }
    command = f"python -m bench.store_floor --rounds {args.rounds}"
    report = write_report(
        "store_floor",
        "The floor under the hot path: store engine, disk, policy engine, per-tool counts",
        command,
        {
            "store engine": dict(engine_floor),
            "disk and policy": dict(disk_policy),
            "tools p50": dict(tools),
        },
        "ms",
        Path(args.out),
        extra={
            "per call: where the time goes (means)": per_call,
            "background projector, whole run": {
                "projections": counter.projections[BACKGROUND],
                "statements": counter.statements[BACKGROUND],
                "in statements ms": round(counter.statement_ms[BACKGROUND], 1),
            },
            "machine load before": load_before,
            "machine load after": machine_load(),
        },
    )
    table = _per_call_table(per_call)
    markdown = Path(args.out) / "store_floor.md"
    markdown.write_text(markdown.read_text() + "\n" + table)
    print(report + "\n" + table)
    return 0


def _per_call_table(per_call: dict[str, dict[str, float]]) -> str:
    columns = list(next(iter(per_call.values())))
    lines = [
        "## Per call: where the time goes (means, ms unless counted)",
        "",
        "| tool | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    lines += [
        f"| {tool} | " + " | ".join(str(row[c]) for c in columns) + " |"
        for tool, row in per_call.items()
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
