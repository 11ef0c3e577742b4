"""How long `serve` takes to be ready on a loaded store, and its memory (issue 20, item 8).

Ready means answering a tool call, not `initialize`: `serve` answers the handshake while its
store still opens (cli/serve.py), so the clock runs from launching the process to the answer
of its first `engram_memory_search` through the real SDK client over stdio (fresh signed
context, embedded engine). RSS of the server's process tree is read right then, and again
after `searches` more searches. Used by bench/import_speed.py (`--serve-searches`) on the
store the import just loaded, or alone on a directory `import_speed --keep` left:

    .venv/bin/python -m bench.serve_ready --dir WORK [--searches 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.shared.exceptions import MCPError

from bench.report import machine_load
from bench.search_engram import BINDING
from bench.stdio_probe import quiet_server, server_pid, tree_rss_bytes
from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import connect, server_env
from engram_memory.host.keys import HostSigningKey

_SERVE = ("-m", "engram_memory.cli", "serve", "--transport", "stdio")
# Words of every corpus bench/corpus.py writes (its head words), one to three a query.
_WORDS = (
    *("refund", "customer", "order", "ticket", "payment", "support", "account", "delivery"),
    *("invoice", "escalation", "shipment", "carrier", "damaged", "replacement", "billing"),
    *("contract", "renewal", "discount", "credit", "warranty"),
)
_MIB = 1024 * 1024


def queries(count: int) -> list[str]:
    """`count` deterministic queries over the corpus's frequent words."""
    size = len(_WORDS)
    return [
        " ".join(_WORDS[(n * step) % size] for step in range(1, 2 + n % 3)) for n in range(count)
    ]


async def _measure(env: dict[str, str], signing_key: Path, log: Path, searches: int) -> Any:
    params = quiet_server(sys.executable, _SERVE, env, log)
    signer = HostSigningKey.from_pem_file(signing_key)
    arguments = {"purpose_ref": BINDING.purpose_ref}
    started = time.perf_counter()
    # The handshake era desktop clients speak: no 10 s `server/discover` probe to outlast.
    async with connect(params, signer, BINDING, mode="legacy") as host:
        try:
            first = await host.call("engram_memory_search", {"query": "refund", **arguments})
        except MCPError:
            # A store that opens for minutes outlives the signed context of the call sent
            # at launch (refused as expired once it is read); the store is open now, so the
            # same call with a fresh context is answered at once: ready is then.
            first = await host.call("engram_memory_search", {"query": "refund", **arguments})
        ready_s = time.perf_counter() - started
        if not first.envelope.get("ok"):
            raise RuntimeError(f"search failed: {first.envelope['error']['code']}")
        pid = server_pid("engram_memory.cli")
        rss_ready = tree_rss_bytes(pid)
        cpu_ready = process_cpu_s(pid)
        hits = 0
        latencies: list[float] = []
        for query in queries(searches):
            start = time.perf_counter()
            outcome = await host.call("engram_memory_search", {"query": query, **arguments})
            latencies.append((time.perf_counter() - start) * 1000)
            if not outcome.envelope.get("ok"):
                raise RuntimeError(f"search failed: {outcome.envelope['error']['code']}")
            hits += len(outcome.envelope["output"]["value"]["records"])
        rss_after = tree_rss_bytes(pid)
    return {
        "ready_s": round(ready_s, 2),
        "first_search_hits": len(first.envelope["output"]["value"]["records"]),
        "rss_ready_mib": round(rss_ready / _MIB, 1),
        "cpu_ready_s": round(cpu_ready, 2),
        "searches": searches,
        "search_hits": hits,
        "search_ms_p50": round(sorted(latencies)[len(latencies) // 2], 2) if latencies else 0.0,
        "rss_after_searches_mib": round(rss_after / _MIB, 1),
    }


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds `pid` has used (it survives the machine's load, wall time
    does not)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(env: dict[str, str], signing_key: Path, log: Path, searches: int) -> dict[str, Any]:
    """Start `serve` on `env`'s data directory; time to the first search answered, RSS then
    and after `searches` searches.

    Raises:
        RuntimeError: a search was refused.
    """
    result: dict[str, Any] = anyio.run(_measure, env, signing_key, log, searches)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True, help="what `import_speed --keep` left")
    parser.add_argument("--searches", type=int, default=1000)
    args = parser.parse_args()
    work = Path(args.dir)
    secrets = work / "secrets"
    root, signing, public = init_host_dir(secrets)  # existing files are kept
    # The tree under test, and DuckDB's memory bound when the caller sets one.
    passed = ("PYTHONPATH", "ENGRAM_STORE_CACHE_MIB")
    extra = {name: os.environ[name] for name in passed if name in os.environ}
    env = server_env(work / "data", root, public, **extra)
    result = {
        "load_before": machine_load(),
        **measure(env, signing, work / "serve.log", args.searches),
    }
    result["load_after"] = machine_load()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
