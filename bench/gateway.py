"""What the signing gateway adds per call, beside the upstream called directly and the floor.

Usage: .venv/bin/python -m bench.gateway [--rounds 6] [--per-round 20] [--floor-calls 100]
                                         [--warmup 2] [--out bench/results] [--name gateway]

Issue 11 item 7: the gateway adds <= 1 ms p50 per call over the upstream latency. Four
paths, all over stdio through the real MCP SDK client, in the same run:

- floor, direct: the do-nothing tool (bench/floor_server.py);
- floor, through the gateway: `engram-memory gateway` whose upstream child is that floor
  server (the gateway still binds the caller, checks the purpose and mints a fresh token
  per call; the floor ignores it): the hop alone, on a low-noise path;
- tools, direct: `engram-memory serve` over stdio, the reference host minting a fresh
  invocation context per call (and the confirmation for forget) as a host does;
- tools, through the gateway: `engram-memory gateway` over stdio with its own
  `engram-memory serve` child (its own data directory: a store has one server), the stock
  client sending no context; forget goes through an elicitation the client accepts at once
  (so it also pays the elicitation round trip and the gateway's fsynced audit entry).

Each round runs `--floor-calls` floor calls per floor path and `--per-round` iterations of
capture -> request_admission -> search -> get -> forget per tools path, interleaved: a
direct call (iteration) and a gateway one in turn, which goes first alternating, so that
drift in the machine's load (2 shared cores) falls on both alike. The added cost per tool
is the gateway's p50 minus the direct p50 over all samples, with its spread: the same
difference per round (min / median / max). The gateway process's own CPU per call (from
/proc) is recorded too: unlike a latency difference it hardly moves with other load.
Clients speak the handshake era (`mode="legacy"`), as desktop clients do today. Writes
`<name>.json`, `<name>.md` and `<name>.png` into --out; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import yaml
from mcp import StdioServerParameters
from mcp.client.client import Client
from mcp.client.session import ClientRequestContext

from bench.gateway_report import TARGET_MS, TOOLS, Samples, added_costs, merged, verdict_markdown
from bench.report import RESULTS, machine_load, write_report
from bench.stdio_probe import progress, server_pid
from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import Binding, ReferenceHost, connect, server_env
from engram_memory.host.keys import HostSigningKey

ROOT = Path(__file__).resolve().parents[1]
PURPOSE = "purpose:support-case"
APPROVER = "human:bench"
SERVE = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "stdio"]
FLOOR = [sys.executable, "-m", "bench.floor_server", "stdio"]
# The caller the gateway's configuration binds; the direct host signs the same one.
BINDING = Binding("acme", "support", "user:alice", PURPOSE, agent_id="agent:demo-assistant")

Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


def cpu_ms(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _os_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def write_gateway_config(
    directory: Path, signing_key: Path, upstream: list[str], env: dict[str, str]
) -> Path:
    """A stdio-mode gateway configuration whose upstream child is `upstream`."""
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        "mode": "stdio",
        "host_id": "host:bench-gateway",
        "signing_key": str(signing_key),
        "audit_log": "gateway-audit.jsonl",
        "upstream": {"command": upstream, "env": env, "timeout_s": 30},
        "confirmation": {"timeout_s": 30},
        "stdio": {
            "tenant": BINDING.tenant,
            "workspace": BINDING.workspace,
            "principal": BINDING.principal,
            "agent_id": BINDING.agent_id,
            "purposes": [PURPOSE],
            "os_user": _os_user(),
            "approver": APPROVER,
        },
    }
    config = directory / "gateway.yaml"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    return config


def gateway_params(config: Path) -> StdioServerParameters:
    pythonpath = os.environ.get("PYTHONPATH", "")
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "engram_memory.cli", "gateway", "--config", str(config)],
        # PYTHONPATH passed on: set to another tree's `service/`, the gateway runs that code.
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [pythonpath, str(ROOT)]))},
    )


async def _accept(
    _ctx: ClientRequestContext, _params: types.ElicitRequestParams
) -> types.ElicitResult:
    """The human says yes at once: the benchmark times the machinery, not a person."""
    return types.ElicitResult(action="accept", content={"confirm": True})


async def _raw_call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One raw tools/call (no client-side output validation, as the reference host sends)."""
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(name=tool, arguments=arguments)
    )
    result = await client.session.send_request(request, types.CallToolResult)
    return dict(result.structured_content or {})


def _value(tool: str, envelope: dict[str, Any]) -> dict[str, Any]:
    if not envelope.get("ok"):
        raise RuntimeError(f"{tool} failed: {envelope.get('error')}")
    value: dict[str, Any] = envelope["output"]["value"]
    return value


async def _iteration(call: Call, samples: Samples, n: int) -> None:
    """capture -> request_admission -> search -> get -> forget, each timed."""

    async def timed(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        envelope = await call(f"engram_memory_{tool}", arguments)
        samples[tool].append((time.perf_counter() - start) * 1000)
        return _value(tool, envelope)

    text = f"Refund approved for order {n} after courier loss {uuid.uuid4().hex[:8]}."
    captured = await timed("capture", demo_capture_arguments(text, f"b-cap-{uuid.uuid4().hex}"))
    admitted = await timed(
        "request_admission",
        {"candidate_id": captured["candidate_id"], "idempotency_key": f"b-adm-{uuid.uuid4()}"},
    )
    record_id = admitted["outcome"]["record_id"]
    await timed("search", {"query": f"refund order {n}", "purpose_ref": PURPOSE})
    await timed("get", {"record_id": record_id, "purpose_ref": PURPOSE})
    forget = {"record_id": record_id, "idempotency_key": f"b-fgt-{uuid.uuid4()}"}
    await timed("forget", {**forget, "reason_ref": "reason:bench"})


def direct_call(host: ReferenceHost) -> Call:
    """The reference host's call: it mints the context (and forget's confirmation) itself."""

    async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        token = None
        if tool == "engram_memory_forget":
            token = host.confirmation_for(tool, arguments, arguments["record_id"], APPROVER)
        return (await host.call(tool, arguments, confirmation=token)).envelope

    return call


def gateway_call(client: Client) -> Call:
    async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await _raw_call(client, tool, arguments)

    return call


async def _floor_call(client: Client, n: int, samples: list[float]) -> None:
    start = time.perf_counter()
    await _raw_call(client, "floor_echo", {"n": n})
    samples.append((time.perf_counter() - start) * 1000)


class Paths:
    """The four connections, open for the whole run."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    async def open(self, stack: AsyncExitStack) -> None:
        root_key, signing_key, public_keys = init_host_dir(self.workdir / "secrets")
        signer = HostSigningKey.from_pem_file(signing_key)

        def engram_env(name: str) -> dict[str, str]:
            return server_env(self.workdir / name, root_key, public_keys)

        floor_env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
        self.floor_direct = await stack.enter_async_context(
            Client(
                StdioServerParameters(command=FLOOR[0], args=FLOOR[1:], env=floor_env),
                mode="legacy",
                cache=None,
            )
        )
        floor_config = write_gateway_config(
            self.workdir / "gw-floor", signing_key, FLOOR, floor_env
        )
        self.floor_gateway = await stack.enter_async_context(
            Client(gateway_params(floor_config), mode="legacy", cache=None)
        )
        self.floor_gateway_pid = server_pid(str(floor_config))
        serve_direct = StdioServerParameters(
            command=SERVE[0], args=SERVE[1:], env=engram_env("direct-data")
        )
        host = await stack.enter_async_context(
            connect(serve_direct, signer, BINDING, mode="legacy")
        )
        self.direct = direct_call(host)
        tools_config = write_gateway_config(
            self.workdir / "gw-tools", signing_key, SERVE, engram_env("gateway-data")
        )
        gateway = await stack.enter_async_context(
            Client(
                gateway_params(tools_config),
                mode="legacy",
                elicitation_callback=_accept,
                cache=None,
            )
        )
        self.gateway = gateway_call(gateway)
        self.gateway_pid = server_pid(str(tools_config))


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """All rounds; the samples per path and per round."""
    direct_rounds: list[Samples] = []
    gateway_rounds: list[Samples] = []
    floor_rounds: list[dict[str, list[float]]] = []
    # The gateway processes' own CPU over the measured calls: robust to other load.
    cpu = {"floor": 0.0, "tools": 0.0}
    async with AsyncExitStack() as stack:
        paths = Paths(workdir)
        await paths.open(stack)
        progress("  warming up every path")
        warm: Samples = defaultdict(list)
        for n in range(args.warmup):
            await _iteration(paths.direct, warm, -n - 1)
            await _iteration(paths.gateway, warm, -n - 1)
            for k in range(10):
                await _floor_call(paths.floor_direct, k, [])
                await _floor_call(paths.floor_gateway, k, [])
        for r in range(args.rounds):
            direct: Samples = defaultdict(list)
            gateway: Samples = defaultdict(list)
            floor: dict[str, list[float]] = {"direct": [], "through the gateway": []}
            # Interleaved call by call (the first path alternating), so that drift in the
            # machine's load falls on both paths alike.
            floor_before = cpu_ms(paths.floor_gateway_pid)
            for k in range(args.floor_calls):
                pair = [
                    (paths.floor_direct, floor["direct"]),
                    (paths.floor_gateway, floor["through the gateway"]),
                ]
                for client, samples in pair[:: 1 if (r + k) % 2 == 0 else -1]:
                    await _floor_call(client, k, samples)
            cpu["floor"] += cpu_ms(paths.floor_gateway_pid) - floor_before
            tools_before = cpu_ms(paths.gateway_pid)
            for n in range(args.per_round):
                pair = [(paths.direct, direct), (paths.gateway, gateway)]
                for call, samples in pair[:: 1 if (r + n) % 2 == 0 else -1]:
                    await _iteration(call, samples, r * args.per_round + n)
            cpu["tools"] += cpu_ms(paths.gateway_pid) - tools_before
            direct_rounds.append(direct)
            gateway_rounds.append(gateway)
            floor_rounds.append(floor)
            progress(
                f"  round {r + 1}/{args.rounds}: search p50 direct "
                f"{statistics.median(direct['search']):.1f} ms, gateway "
                f"{statistics.median(gateway['search']):.1f} ms; floor "
                f"{statistics.median(floor['direct']):.2f} / "
                f"{statistics.median(floor['through the gateway']):.2f} ms"
            )
    calls = args.rounds * args.per_round * len(TOOLS)
    return {
        "direct": direct_rounds,
        "gateway": gateway_rounds,
        "floor": floor_rounds,
        "gateway cpu ms per call": {
            "floor_echo": round(cpu["floor"] / (args.rounds * args.floor_calls), 3),
            "tools (mean of the five)": round(cpu["tools"] / calls, 3),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--floor-calls", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations per path")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--name", default="gateway")
    args = parser.parse_args()
    out = Path(args.out)
    progress(
        f"benchmarking the gateway: {args.rounds} rounds x {args.per_round} iterations, "
        f"{args.floor_calls} floor calls per path and round"
    )
    load_before = machine_load()
    with tempfile.TemporaryDirectory(prefix="engram-bench-gw-") as tmp:
        measured = anyio.run(run, args, Path(tmp))
    load_after = machine_load()
    rows = added_costs(measured)
    direct, gateway = merged(measured["direct"]), merged(measured["gateway"])
    floor = merged(measured["floor"])
    series = {
        "direct (reference host mints)": {tool: direct[tool] for tool in TOOLS},
        "through engram-memory gateway": {tool: gateway[tool] for tool in TOOLS},
        "floor (do-nothing tool)": {
            "direct": floor["direct"],
            "through the gateway": floor["through the gateway"],
        },
    }
    command = (
        f"python -m bench.gateway --rounds {args.rounds} --per-round {args.per_round} "
        f"--floor-calls {args.floor_calls}"
    )
    markdown = write_report(
        args.name,
        "What the signing gateway adds per call (stdio, SDK client)",
        command,
        series,
        "ms",
        out,
        extra={
            "machine load before": load_before,
            "machine load after": load_after,
            "gateway process CPU per call (user+system, ms)": measured["gateway cpu ms per call"],
        },
    )
    markdown += verdict_markdown(rows, command)
    (out / f"{args.name}.md").write_text(markdown)
    report = json.loads((out / f"{args.name}.json").read_text())
    report["meta"].update({"machine load before": load_before, "machine load after": load_after})
    report["added"] = rows
    report["gateway cpu ms per call"] = measured["gateway cpu ms per call"]
    report["target added p50 ms"] = TARGET_MS
    (out / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
