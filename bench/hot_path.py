"""In-process hot path: per-tool latency, governance share, sustained writes, fairness, growth.

Usage: .venv/bin/python -m bench.hot_path [--rounds N] [--large-records N] [--out DIR]

Everything runs in one process on a real DuckDB file and key directory, with the embedded
Wasm policy engine, fsync and every check on; tokens are minted before the clock starts
(a host pays that, not the service). Measures:

- p50 of each tool called through `MemoryService.call_tool` (no transport);
- the governance share: one policy decision, one audit append (its own transaction), and
  sealing a body under a new item key (key file written and fsynced);
- sustained captures per second from one thread;
- fairness: tenant A admits a ~1 MiB capture while tenant B searches in a loop; reports
  the admission time and B's worst search during it against B's quiet p50;
- growth: capture + admission p50 on a store bulk-loaded (internal fast path, SQL) to 1k
  and to --large-records records.

Writes `hot_path.{json,md,png}` into --out; progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.report import RESULTS, machine_load, write_report
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.core import item_keys, steps
from engram_memory.core.call_audit import CallAudit
from engram_memory.core.index_loading import follow_store
from engram_memory.core.runtime import CallContext, Services, ServiceSettings
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.confirmation import ConfirmationBinding, mint_confirmation
from engram_memory.host.context import mint_invocation, verify_invocation
from engram_memory.host.keys import HostKeyring, HostSigningKey
from engram_memory.policy.decider import PolicyDecider, Subject
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.anchors import open_anchor
from engram_memory.store.call_log import DIRECTORY as CALL_LOG_DIRECTORY
from engram_memory.store.call_log import SegmentLog
from engram_memory.store.connection import load_queries
from engram_memory.store.database import Database
from engram_memory.store.transaction import Transaction
from engram_memory.tools.dispatch import CallRequest, MemoryService

SIGNER = HostSigningKey.generate()
_BULK = load_queries("bench", "bulk_load.sql")
PURPOSE = "purpose:support-case"


def _clock() -> int:
    return time.time_ns() // 1_000_000


def _services(
    data_dir: Path, engine: EmbeddedWasmEngine, root_key: RootKey | None = None
) -> Services:
    """Assembled as the server assembles them: the head anchor advances after every commit
    (one more fsync per writing call), as it does in production."""
    root_key = root_key or RootKey(os.urandom(32))
    database = Database.open(data_dir)
    # Audit-only calls commit through the call log, as in `serve` (core/opening.py).
    database.attach_call_log(SegmentLog(data_dir / CALL_LOG_DIRECTORY, root_key.call_log_key()))
    open_anchor(database, data_dir, root_key.head_anchor_key())
    # As `serve` does once the store is served: DuckDB follows the log in the background.
    database.start_projector()
    return Services(
        database=database,
        keys=KeyStore(data_dir / KEYS_DIRECTORY),
        decider=PolicyDecider(engine, engine.identity, _clock),
        root_key=root_key,
        host_keys=HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()}),
        settings=ServiceSettings(host_memory_enabled=True),
        search_index=follow_store(database),
    )


class Caller:
    """One binding calling the service in-process, the way the dispatcher is reached."""

    def __init__(
        self,
        service: MemoryService,
        tenant: str = "acme",
        workspace: str = "support",
        principal: str = "user:alice",
    ) -> None:
        self.service = service
        self.tenant, self.workspace, self.principal = tenant, workspace, principal

    def token(self) -> str:
        return mint_invocation(
            SIGNER,
            host_id="host:bench",
            tenant=self.tenant,
            workspace=self.workspace,
            principal=self.principal,
            agent_id="agent:bench",
            session="session:bench",
            purpose_ref=PURPOSE,
            audit_id=f"audit:{uuid.uuid4().hex}",
        )

    def confirmation(self, tool: str, arguments: dict[str, Any], target: str) -> str:
        binding = ConfirmationBinding(
            cap=tool,
            target=target,
            op=operation_digest(tool, normalize(arguments)),
            session="session:bench",
            principal=self.principal,
        )
        return mint_confirmation(SIGNER, binding, approver="human:bench")

    def timed(
        self,
        samples: dict[str, list[float]] | None,
        tool: str,
        arguments: dict[str, Any],
        confirmation: str | None = None,
    ) -> dict[str, Any]:
        request = CallRequest(f"engram_memory_{tool}", arguments, self.token(), confirmation)
        start = time.perf_counter()
        envelope = self.service.call_tool(request)
        elapsed = (time.perf_counter() - start) * 1000
        if not envelope["ok"]:
            raise RuntimeError(f"{tool} failed: {envelope['error']['code']}")
        if samples is not None:
            samples[tool].append(elapsed)
        value: dict[str, Any] = envelope["output"]["value"]
        return value


def _key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


def _round(caller: Caller, samples: dict[str, list[float]] | None, i: int) -> None:
    text = f"Refund approved for order {i} after courier loss number {uuid.uuid4().hex[:8]}."
    captured = caller.timed(samples, "capture", demo_capture_arguments(text, _key("cap")))
    admitted = caller.timed(
        samples,
        "request_admission",
        {"candidate_id": captured["candidate_id"], "idempotency_key": _key("adm")},
    )
    record_id = admitted["outcome"]["record_id"]
    caller.timed(samples, "search", {"query": f"refund order {i}", "purpose_ref": PURPOSE})
    caller.timed(samples, "get", {"record_id": record_id, "purpose_ref": PURPOSE})
    forget = {"record_id": record_id, "idempotency_key": _key("fgt"), "reason_ref": "reason:b"}
    caller.timed(
        samples,
        "forget",
        forget,
        caller.confirmation("engram_memory_forget", forget, record_id),
    )
    pending = caller.timed(None, "capture", demo_capture_arguments(text + " p", _key("cap")))
    candidate_id = pending["candidate_id"]
    withdraw = {"candidate_id": candidate_id, "idempotency_key": _key("wd"), "reason_ref": "r:b"}
    caller.timed(
        samples,
        "withdraw",
        withdraw,
        caller.confirmation("engram_memory_withdraw", withdraw, candidate_id),
    )


def _governance(services: Services, caller: Caller, rounds: int) -> dict[str, list[float]]:
    """Policy decision, audit append (own transaction) and seal + key file, each alone."""
    invocation = verify_invocation(caller.token(), services.host_keys, _clock() / 1000)
    samples: dict[str, list[float]] = defaultdict(list)
    subject = Subject("acme", "support", "user:alice", "agent:bench", PURPOSE, "host:bench")
    body: dict[str, Any] = {"text": "x" * 600}
    for _ in range(rounds):
        ctx = CallContext(services, invocation, "engram_memory_capture", _clock())
        audit = CallAudit()
        start = time.perf_counter()
        audit.decided(services.decider.authz(subject, "engram_memory_capture").decision)
        mid = time.perf_counter()
        with services.database.transaction() as tx:
            steps.write_audit(tx, ctx, audit.facts("ok"))
        end = time.perf_counter()
        with item_keys.fresh_key(ctx, f"bench-item-{uuid.uuid4().hex}") as key:
            key.seal(body)
        sealed = time.perf_counter()
        samples["policy decision (authz)"].append((mid - start) * 1000)
        samples["audit append + commit"].append((end - mid) * 1000)
        samples["seal + key file fsync"].append((sealed - end) * 1000)
    return samples


def _sustained(caller: Caller, seconds: float) -> float:
    """Captures per second from one thread (tokens minted outside the window)."""
    tokens = [caller.token() for _ in range(int(seconds * 1000))]
    done, start = 0, time.perf_counter()
    for token in tokens:
        arguments = demo_capture_arguments(f"Sustained capture {done}.", _key("sus"))
        envelope = caller.service.call_tool(CallRequest("engram_memory_capture", arguments, token))
        if not envelope["ok"]:
            raise RuntimeError("sustained capture failed")
        done += 1
        if time.perf_counter() - start >= seconds:
            break
    return done / (time.perf_counter() - start)


def _large_capture_arguments() -> dict[str, Any]:
    """~1 MiB of text in 15 components of ~63 KiB, varied words (many distinct terms)."""
    arguments = demo_capture_arguments("Large record head.", _key("large"))
    payload = arguments["payload"]
    words = [f"w{n:05d}x{n % 97}" for n in range(60_000)]
    for c in range(15):
        chunk = " ".join(words[(c * 4000) % 60_000 : (c * 4000) % 60_000 + 4000] * 2)
        payload["components"].append(
            {
                "component_id": f"component:part{c:02d}",
                "kind": "evidence",
                "text": chunk[:63_000],
                "citation_ids": ["citation:ticket"],
            }
        )
    payload["components"].sort(key=lambda comp: comp["component_id"])
    return arguments


class WriterHolds:
    """How long each writing transaction of one thread held the writer (lock taken → after
    COMMIT), by wrapping this one Database instance's `transaction` (benchmark only)."""

    def __init__(self, database: Database) -> None:
        self._inner = database.transaction
        self.thread: int | None = None
        self.holds: list[float] = []
        database.transaction = self._timed  # type: ignore[method-assign]

    @contextmanager
    def _timed(self) -> Iterator[Transaction]:
        with self._inner() as tx:
            start = time.perf_counter()
            yield tx
        if threading.get_ident() == self.thread:
            self.holds.append((time.perf_counter() - start) * 1000)


def _fairness(
    caller_a: Caller, caller_b: Caller, holds: WriterHolds, admissions_wanted: int
) -> dict[str, list[float]]:
    """B's search latency while A admits a ~1 MiB capture, against B's quiet latency."""
    for i in range(5):
        _round(caller_b, None, 10_000 + i)
    quiet: list[float] = []
    search = {"query": "refund order", "purpose_ref": PURPOSE}
    for _ in range(30):
        start = time.perf_counter()
        caller_b.timed(None, "search", search)
        quiet.append((time.perf_counter() - start) * 1000)
    during: list[float] = []
    admissions: list[float] = []

    def searches(admitting: threading.Event, finished: threading.Event) -> None:
        admitting.wait()
        while not finished.is_set():
            start = time.perf_counter()
            caller_b.timed(None, "search", search)
            during.append((time.perf_counter() - start) * 1000)

    for _ in range(admissions_wanted):
        large = caller_a.timed(None, "capture", _large_capture_arguments())
        admitting, finished = threading.Event(), threading.Event()
        worker = threading.Thread(target=searches, args=(admitting, finished))
        worker.start()
        admitting.set()
        holds.thread = threading.get_ident()
        start = time.perf_counter()
        caller_a.timed(
            None,
            "request_admission",
            {"candidate_id": large["candidate_id"], "idempotency_key": _key("adm-large")},
        )
        admissions.append((time.perf_counter() - start) * 1000)
        holds.thread = None
        finished.set()
        worker.join()
    return {
        "B search, quiet": quiet,
        "B search, during A's 1 MiB admission": during,
        "A 1 MiB admission (whole call)": admissions,
        "A 1 MiB admission, writer held (per write transaction)": holds.holds,
    }


def _bulk_load(services: Services, caller: Caller, records: int) -> None:
    """`records` accepted records (with journal, idempotency, index and audit rows) in the
    caller's scope, straight through SQL: the cost of a write must not depend on them."""
    invocation = verify_invocation(caller.token(), services.host_keys, _clock() / 1000)
    scope, tag = invocation.scope_ref, uuid.uuid4().hex[:8]
    with services.database.transaction() as tx:
        (cursor,) = tx.fetchone(_BULK["journal_length"], [scope]) or (0,)
        (sequence,) = tx.fetchone(_BULK["audit_length"]) or (0,)
        for name in ("journal", "candidates", "records", "idempotency", "documents", "postings"):
            tx.execute(_BULK[name], [scope, tag, records, cursor][: _BULK[name].count("$4") + 3])
        tx.execute(_BULK["audit"], [scope, tag, records, sequence])
    services.database.checkpoint()
    if services.search_index is not None:  # raw SQL bypassed it: rebuild from the store
        with services.database.reading() as tx:
            services.search_index.load(tx)


def _growth(
    engine: EmbeddedWasmEngine, workdir: Path, sizes: list[int], rounds: int
) -> dict[str, list[float]]:
    series: dict[str, list[float]] = {}
    for size in sizes:
        services = _services(workdir / f"growth-{size}", engine)
        _bulk_load(services, Caller(MemoryService(services)), size)
        # Reopened: the writer's head cache and the anchor are loaded from the store, as a
        # server start would (the bulk load wrote chains behind the cache's back).
        services.database.close()
        services = _services(workdir / f"growth-{size}", engine, services.root_key)
        caller = Caller(MemoryService(services))
        samples: dict[str, list[float]] = defaultdict(list)
        for i in range(5):
            _round(caller, None, -i)
        for i in range(rounds):
            text = f"Growth capture {i} {uuid.uuid4().hex[:8]}."
            start = time.perf_counter()
            captured = caller.timed(None, "capture", demo_capture_arguments(text, _key("g")))
            caller.timed(
                None,
                "request_admission",
                {"candidate_id": captured["candidate_id"], "idempotency_key": _key("ga")},
            )
            samples["x"].append((time.perf_counter() - start) * 1000)
        series[f"capture + admission at {size} records"] = samples["x"]
        services.database.close()
        print(f"  growth {size} done", file=sys.stderr, flush=True)
    return series


def _growth_rounds(rounds: int) -> int:
    """50 or half the rounds, whichever is more; a smoke's few rounds (< 50) are taken as is."""
    return rounds if rounds < 50 else max(50, rounds // 2)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--large-records", type=int, default=50_000)
    parser.add_argument("--sustained-seconds", type=float, default=10.0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    load_before = machine_load()
    engine = EmbeddedWasmEngine()
    with tempfile.TemporaryDirectory(prefix="engram-bench-") as tmp:
        workdir = Path(tmp)
        services = _services(workdir / "main", engine)
        caller = Caller(MemoryService(services))
        print(f"in-process tools, {args.rounds} rounds", file=sys.stderr, flush=True)
        for i in range(5):
            _round(caller, None, -i - 1)
        tools: dict[str, list[float]] = defaultdict(list)
        for i in range(args.rounds):
            _round(caller, tools, i)
        print("governance components", file=sys.stderr, flush=True)
        governance = _governance(services, caller, args.rounds)
        print("sustained captures", file=sys.stderr, flush=True)
        rate = _sustained(caller, args.sustained_seconds)
        print("fairness (1 MiB admission vs another tenant's search)", file=sys.stderr)
        other_tenant = Caller(MemoryService(services), "globex", "main", "user:carol")
        # Five 1 MiB admissions; fewer only when --rounds asks for fewer (the tests' smoke).
        fairness = _fairness(
            caller, other_tenant, WriterHolds(services.database), min(5, args.rounds)
        )
        services.database.close()
        print("growth (bulk-loaded stores)", file=sys.stderr, flush=True)
        growth = _growth(engine, workdir, [1_000, args.large_records], _growth_rounds(args.rounds))
    engine.close()
    command = (
        f"python -m bench.hot_path --rounds {args.rounds} --large-records {args.large_records}"
        f" --sustained-seconds {args.sustained_seconds}"
    )
    print(
        write_report(
            "hot_path",
            "In-process hot path (embedded engine, fsync and every check on)",
            command,
            {
                "in-process tool p50": dict(tools),
                "governance components": dict(governance),
                "fairness": fairness,
                "growth": growth,
            },
            "ms",
            Path(args.out),
            extra={
                "sustained captures per second (one thread)": round(rate, 1),
                "machine load before": load_before,
                "machine load after": machine_load(),
            },
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
