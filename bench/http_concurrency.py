"""Streamable HTTP under 16 concurrent clients: mixed calls against the real server process.

Usage: .venv/bin/python -m bench.http_concurrency [--clients 16] [--seconds 20] [--records 20]
       [--out DIR]

One `serve --transport http` process (embedded engine, fsync and every check on), a store
seeded with records; each client is its own SDK session and loops over a mix of search, get,
capture and request_admission (of its own captures) with a fresh signed context per call.
The floor is the same load (same clients, a fresh signed context per call) of a do-nothing
tool on `bench.floor_server`, served through our own HTTP stack (guard, drain, JSON gate,
the SDK app, the worker hop). Reports calls/s, p50/p99, errors and the server's CPU time
per call (user + system, which the machine's load barely moves); writes
`http_concurrency.{json,md,png}`.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio

from bench.report import RESULTS, machine_load, percentile, write_report
from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import BINDING, demo_capture_arguments
from engram_memory.client.reference_host import (
    ReferenceHost,
    connect,
    server_env,
    wait_until_listening,
)
from engram_memory.host.keys import HostSigningKey

MIX = ("search", "get", "search", "capture", "get", "request_admission")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(command: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    process = subprocess.Popen([*command, str(port)], env=env)
    url = f"http://127.0.0.1:{port}/mcp"
    wait_until_listening(url, process)
    return process, url


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process `pid` has used: unlike latency, it barely moves
    with the machine's load, so it is the figure to compare across runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Load:
    """Samples and errors of one load run, and the server's CPU time while it ran."""

    def __init__(self, pid: int | None = None) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.errors = 0
        self.calls = 0
        self._pid = pid
        self.cpu_s = 0.0

    @contextmanager
    def measuring_cpu(self) -> Iterator[None]:
        start = _cpu_seconds(self._pid) if self._pid is not None else 0.0
        try:
            yield
        finally:
            if self._pid is not None:
                self.cpu_s = _cpu_seconds(self._pid) - start


async def _client_loop(
    host: ReferenceHost, record_ids: list[str], load: Load, until: float
) -> None:
    pending: list[str] = []
    step = 0
    while time.perf_counter() < until:
        tool = MIX[step % len(MIX)]
        step += 1
        if tool == "request_admission" and not pending:
            tool = "capture"
        if tool == "search":
            arguments: dict[str, Any] = {
                "query": "refund order",
                "purpose_ref": BINDING.purpose_ref,
            }
        elif tool == "get":
            record = record_ids[step % len(record_ids)]
            arguments = {"record_id": record, "purpose_ref": BINDING.purpose_ref}
        elif tool == "capture":
            text = f"Refund approved for order {step} ({uuid.uuid4().hex[:6]})."
            arguments = demo_capture_arguments(text, f"http-cap-{uuid.uuid4().hex}")
        else:
            arguments = {"candidate_id": pending.pop(), "idempotency_key": f"http-{uuid.uuid4()}"}
        start = time.perf_counter()
        try:
            outcome = await host.call(f"engram_memory_{tool}", arguments)
            ok = bool(outcome.envelope.get("ok"))
        except Exception:  # noqa: BLE001 - a benchmark counts every failure as an error
            ok, outcome = False, None
        load.samples[tool].append((time.perf_counter() - start) * 1000)
        load.calls += 1
        if not ok:
            load.errors += 1
        elif tool == "capture" and outcome is not None:
            pending.append(outcome.envelope["output"]["value"]["candidate_id"])


async def _engram(
    url: str, pid: int, signer: HostSigningKey, clients: int, seconds: float, records: int
) -> Load:
    async with connect(url, signer, BINDING) as seeder:
        record_ids = []
        for i in range(records):
            text = f"Refund approved for order {i} after courier loss."
            arguments = demo_capture_arguments(text, f"seed-{uuid.uuid4().hex}")
            captured = (await seeder.call("engram_memory_capture", arguments)).envelope
            admit = {
                "candidate_id": captured["output"]["value"]["candidate_id"],
                "idempotency_key": f"seed-adm-{uuid.uuid4().hex}",
            }
            admitted = (await seeder.call("engram_memory_request_admission", admit)).envelope
            record_ids.append(admitted["output"]["value"]["outcome"]["record_id"])
    load = Load(pid)
    async with connect(url, signer, BINDING) as warm:
        await _client_loop(warm, record_ids, Load(), time.perf_counter() + _warm_up(2, seconds))
    hosts: list[ReferenceHost] = []
    async with AsyncExitStack() as stack:
        for _ in range(clients):
            hosts.append(await stack.enter_async_context(connect(url, signer, BINDING)))
        until = time.perf_counter() + seconds
        with load.measuring_cpu():
            async with anyio.create_task_group() as group:
                for host in hosts:
                    group.start_soon(_client_loop, host, record_ids, load, until)
    return load


async def _floor_loop(host: ReferenceHost, load: Load, until: float) -> None:
    n = 0
    while time.perf_counter() < until:
        n += 1
        start = time.perf_counter()
        try:
            ok = bool((await host.call("floor_echo", {"n": n})).envelope.get("ok"))
        except Exception:  # noqa: BLE001
            ok = False
        load.samples["floor_echo"].append((time.perf_counter() - start) * 1000)
        load.calls += 1
        if not ok:
            load.errors += 1


async def _floor(url: str, pid: int, signer: HostSigningKey, clients: int, seconds: float) -> Load:
    load = Load(pid)
    async with AsyncExitStack() as stack:
        hosts = [
            await stack.enter_async_context(connect(url, signer, BINDING)) for _ in range(clients)
        ]
        await _floor_loop(hosts[0], Load(), time.perf_counter() + _warm_up(1, seconds))
        until = time.perf_counter() + seconds
        with load.measuring_cpu():
            async with anyio.create_task_group() as group:
                for host in hosts:
                    group.start_soon(_floor_loop, host, load, until)
    return load


def _warm_up(seconds: float, measured: float) -> float:
    """The warm-up before a load run: never longer than the run itself (a smoke's is short)."""
    return min(seconds, measured)


def _summary(load: Load, seconds: float) -> dict[str, float]:
    every = [s for samples in load.samples.values() for s in samples]
    return {
        "calls/s": round(load.calls / seconds, 1),
        "p50 ms": round(percentile(every, 0.5), 2),
        "p99 ms": round(percentile(every, 0.99), 2),
        "errors": load.errors,
        "server CPU ms/call": round(1000 * load.cpu_s / max(1, load.calls), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--records", type=int, default=20, help="records seeded for get")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    load_before = machine_load()
    with tempfile.TemporaryDirectory(prefix="engram-bench-") as tmp:
        workdir = Path(tmp)
        root_key, signing_key, public_keys = init_host_dir(workdir / "secrets")
        env = server_env(workdir / "data", root_key, public_keys)
        signer = HostSigningKey.from_pem_file(signing_key)
        serve = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "http"]
        print(f"engram: {args.clients} clients, {args.seconds} s", file=sys.stderr, flush=True)
        process, url = _start([*serve, "--port"], env)
        try:
            engram = anyio.run(
                _engram, url, process.pid, signer, args.clients, args.seconds, args.records
            )
        finally:
            process.terminate()
            process.wait(timeout=30)
        print("floor: same load on a do-nothing tool", file=sys.stderr, flush=True)
        floor_process, floor_url = _start([sys.executable, "-m", "bench.floor_server", "http"], env)
        try:
            floor = anyio.run(
                _floor, floor_url, floor_process.pid, signer, args.clients, args.seconds
            )
        finally:
            floor_process.terminate()
            floor_process.wait(timeout=30)
    command = (
        f"python -m bench.http_concurrency --clients {args.clients} --seconds {args.seconds}"
        f" --records {args.records}"
    )
    print(
        write_report(
            "http_concurrency",
            f"Streamable HTTP, {args.clients} concurrent clients, mixed calls",
            command,
            {
                "engram, mixed calls": dict(engram.samples),
                "floor (do-nothing tool)": dict(floor.samples),
            },
            "ms",
            Path(args.out),
            extra={
                "engram": _summary(engram, args.seconds),
                "floor": _summary(floor, args.seconds),
                "machine load before": load_before,
                "machine load after": machine_load(),
            },
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
