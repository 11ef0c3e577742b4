"""Per-tool latency over stdio through the real MCP SDK client (embedded policy engine).

Usage: .venv/bin/python -m bench.tools_stdio [--rounds N] [--out bench/results]

One server process, one client session, the reference host minting a fresh invocation
context (and, for withdraw/forget, a confirmation) per call, exactly as a host would. Each
round runs capture -> request_admission -> search -> get -> forget plus capture -> withdraw,
so every measured call does real work. Latency is wall time from the client's send to the
parsed result (JWS minting included, since every real host pays it). Writes
`tools_stdio.json`, `tools_stdio.md` and `tools_stdio.png` into --out.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import StdioServerParameters
from mcp.client.client import Client

from bench.report import RESULTS, machine_load, write_report
from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import BINDING, demo_capture_arguments
from engram_memory.client.reference_host import ReferenceHost, connect, server_env
from engram_memory.host.keys import HostSigningKey

APPROVER = "human:bench"
TOOLS = (
    "engram_memory_capture",
    "engram_memory_request_admission",
    "engram_memory_search",
    "engram_memory_get",
    "engram_memory_forget",
    "engram_memory_withdraw",
)


async def _timed(samples: dict[str, list[float]], tool: str, call: Any) -> dict[str, Any]:
    start = time.perf_counter()
    outcome = await call
    samples[tool].append((time.perf_counter() - start) * 1000)
    if not outcome.envelope.get("ok"):
        raise RuntimeError(f"{tool} failed: {outcome.envelope.get('error')}")
    value: dict[str, Any] = outcome.envelope["output"]["value"]
    return value


async def _round(host: ReferenceHost, samples: dict[str, list[float]], i: int) -> None:
    text = f"Refund approved for order {i} after courier loss number {uuid.uuid4().hex[:8]}."
    captured = await _timed(
        samples,
        TOOLS[0],
        host.call(TOOLS[0], demo_capture_arguments(text, f"bench-cap-{uuid.uuid4().hex}")),
    )
    admit_args = {
        "candidate_id": captured["candidate_id"],
        "idempotency_key": f"bench-adm-{uuid.uuid4().hex}",
    }
    outcome = await _timed(samples, TOOLS[1], host.call(TOOLS[1], admit_args))
    record_id = outcome["outcome"]["record_id"]
    await _timed(
        samples,
        TOOLS[2],
        host.call(TOOLS[2], {"query": f"refund order {i}", "purpose_ref": BINDING.purpose_ref}),
    )
    await _timed(
        samples,
        TOOLS[3],
        host.call(TOOLS[3], {"record_id": record_id, "purpose_ref": BINDING.purpose_ref}),
    )
    forget_args = {
        "record_id": record_id,
        "idempotency_key": f"bench-fgt-{uuid.uuid4().hex}",
        "reason_ref": "reason:bench",
    }
    token = host.confirmation_for(TOOLS[4], forget_args, record_id, APPROVER)
    await _timed(samples, TOOLS[4], host.call(TOOLS[4], forget_args, confirmation=token))
    pending = await host.call(
        TOOLS[0], demo_capture_arguments(text + " pending", f"bench-cap-{uuid.uuid4().hex}")
    )
    candidate_id = pending.envelope["output"]["value"]["candidate_id"]
    withdraw_args = {
        "candidate_id": candidate_id,
        "idempotency_key": f"bench-wd-{uuid.uuid4().hex}",
        "reason_ref": "reason:bench",
    }
    token = host.confirmation_for(TOOLS[5], withdraw_args, candidate_id, APPROVER)
    await _timed(samples, TOOLS[5], host.call(TOOLS[5], withdraw_args, confirmation=token))


async def _run(rounds: int, workdir: Path) -> dict[str, list[float]]:
    root_key, signing_key, public_keys = init_host_dir(workdir / "secrets")
    env = server_env(workdir / "data", root_key, public_keys)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "engram_memory.cli", "serve", "--transport", "stdio"],
        env=env,
    )
    samples: dict[str, list[float]] = defaultdict(list)
    async with connect(params, HostSigningKey.from_pem_file(signing_key), BINDING) as host:
        warmup: dict[str, list[float]] = defaultdict(list)
        for i in range(5):
            await _round(host, warmup, -i - 1)
        for i in range(rounds):
            await _round(host, samples, i)
            if (i + 1) % max(1, rounds // 10) == 0:
                print(f"  round {i + 1}/{rounds}", file=sys.stderr, flush=True)
    return samples


async def stdio_floor(rounds: int) -> list[float]:
    """The same transport's floor: a do-nothing tool (bench.floor_server) over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bench.floor_server", "stdio"],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path.cwd())},
    )
    samples: list[float] = []
    async with Client(params, cache=None) as client:
        for n in range(rounds + 20):
            request = types.CallToolRequest(
                params=types.CallToolRequestParams(name="floor_echo", arguments={"n": n})
            )
            start = time.perf_counter()
            await client.session.send_request(request, types.CallToolResult)
            if n >= 20:
                samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    out = Path(args.out)
    print(f"benchmarking {args.rounds} rounds over stdio", file=sys.stderr)
    load_before = machine_load()
    with tempfile.TemporaryDirectory(prefix="engram-bench-") as tmp:
        samples = anyio.run(_run, args.rounds, Path(tmp))
    print("floor: a do-nothing tool over stdio", file=sys.stderr)
    floor = anyio.run(stdio_floor, args.rounds * 6)
    series = {
        "stdio, embedded engine": {t.removeprefix("engram_memory_"): samples[t] for t in TOOLS},
        "stdio floor (do-nothing tool)": {"floor_echo": floor},
    }
    command = f"python -m bench.tools_stdio --rounds {args.rounds}"
    print(
        write_report(
            "tools_stdio",
            "Tool latency over stdio (SDK client)",
            command,
            series,
            "ms",
            out,
            extra={"machine load before": load_before, "machine load after": machine_load()},
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
