"""engram-memory's side of the search-at-scale benchmark: load a corpus, then measure.

Loading uses `engram-memory import` when the tree has it (the operator's bulk path), else
capture + request_admission through `MemoryService`, one call each per line, exactly as an
agent's calls arrive (slow: ~10 records/s). `load_corpus` is the one place that chooses.
Measurements: search and get in-process (`MemoryService.call_tool`, no transport), search
over stdio through the real SDK client against a real `serve` process, that process's RSS,
and the data directory's bytes per record. Embedded policy engine; fsync and every check on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from bench.stdio_probe import (
    directory_bytes,
    progress,
    quiet_server,
    server_pid,
    timed_calls,
    tree_rss_bytes,
)
from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import Binding, connect, server_env
from engram_memory.core.service_config import load_config
from engram_memory.host.context import mint_invocation
from engram_memory.host.keys import HostSigningKey
from engram_memory.server.app import open_service
from engram_memory.tools.dispatch import CallRequest, MemoryService

# The shipped policy's globex/main: carol is its steward, and its admission policy accepts
# `evidence:ticket/` evidence whatever the component kinds (acme/support sends every record
# with a context component to a human adjudication, so nothing would become searchable).
BINDING = Binding(
    tenant="globex",
    workspace="main",
    principal="user:carol",
    purpose_ref="purpose:support-case",
    agent_id="agent:bench",
    session="session:bench",
)
OPERATOR = "human:gina"  # holds `maintain` on globex/main
_SERVE = ("-m", "engram_memory.cli", "serve", "--transport", "stdio")


@dataclass(frozen=True)
class EngramSetup:
    """One data directory with its keys, and the environment a server or import gets."""

    data_dir: Path
    signing_key: Path
    env: dict[str, str]

    @classmethod
    def create(cls, workdir: Path) -> EngramSetup:
        root_key, signing_key, public_keys = init_host_dir(workdir / "secrets")
        data_dir = workdir / "data"
        # The server and the import run the code this process runs, also when PYTHONPATH
        # points at another tree (server_env passes nothing else of our environment).
        extra = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
        return cls(data_dir, signing_key, server_env(data_dir, root_key, public_keys, **extra))


def has_import_command() -> bool:
    """Whether this tree ships `engram-memory import` (the bulk path of issue 8)."""
    probe = subprocess.run(
        [sys.executable, "-m", "engram_memory.cli", "import", "--help"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def _import(setup: EngramSetup, corpus: Path) -> dict[str, Any]:
    """`engram-memory import` in a subprocess; its progress goes to our stderr.

    Raises:
        RuntimeError: the import exited non-zero or left lines unprocessed.
    """
    command = [
        sys.executable,
        "-m",
        "engram_memory.cli",
        "import",
        "--tenant",
        BINDING.tenant,
        "--workspace",
        BINDING.workspace,
        "--principal",
        BINDING.principal,
        "--purpose",
        BINDING.purpose_ref,
        "--operator",
        OPERATOR,
        str(corpus),
    ]
    done = subprocess.run(command, env=setup.env, stdout=subprocess.PIPE, check=False, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"engram-memory import exited {done.returncode}")
    summary: dict[str, Any] = json.loads(done.stdout)["value"]
    return summary


class InProcessCaller:
    """The reference binding calling `MemoryService` directly with fresh signed contexts."""

    def __init__(self, service: MemoryService, signer: HostSigningKey) -> None:
        self.service, self.signer = service, signer

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Raises: RuntimeError: the tool answered with an error (its code is named)."""
        token = mint_invocation(
            self.signer,
            host_id=BINDING.host_id,
            tenant=BINDING.tenant,
            workspace=BINDING.workspace,
            principal=BINDING.principal,
            agent_id=BINDING.agent_id,
            session=BINDING.session,
            purpose_ref=BINDING.purpose_ref,
            audit_id=f"audit:{uuid.uuid4().hex}",
        )
        envelope = self.service.call_tool(CallRequest(f"engram_memory_{tool}", arguments, token))
        if not envelope["ok"]:
            raise RuntimeError(f"{tool} failed: {envelope['error']['code']}")
        value: dict[str, Any] = envelope["output"]["value"]
        return value


def _load_through_tools(setup: EngramSetup, corpus: Path) -> dict[str, Any]:
    """capture + request_admission per line, in-process (the path before the import)."""
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    counts: dict[str, Any] = {"lines": len(lines)}
    with open_service(load_config(env=setup.env)) as service:
        caller = InProcessCaller(service, HostSigningKey.from_pem_file(setup.signing_key))
        for n, line in enumerate(lines, 1):
            arguments = json.loads(line)
            captured = caller.call("capture", arguments)
            admitted = caller.call(
                "request_admission",
                {
                    "candidate_id": captured["candidate_id"],
                    "idempotency_key": "adm-" + arguments["idempotency_key"],
                },
            )
            status = admitted["outcome"]["status"]
            counts[status] = counts.get(status, 0) + 1
            if n % max(1, len(lines) // 10) == 0:
                progress(f"    loaded {n}/{len(lines)} records through the tools")
    return counts


def load_corpus(setup: EngramSetup, corpus: Path) -> dict[str, Any]:
    """Load `corpus` into `setup`'s data directory by the fastest path this tree has."""
    use_import = has_import_command()
    start = time.perf_counter()
    counts = _import(setup, corpus) if use_import else _load_through_tools(setup, corpus)
    seconds = time.perf_counter() - start
    return {
        "path": "engram-memory import" if use_import else "capture + request_admission in-process",
        "seconds": round(seconds, 1),
        "records per second": round(counts.get("lines", 0) / max(seconds, 1e-9), 1),
        "outcomes": counts,
    }


def measure_in_process(
    setup: EngramSetup, queries: Sequence[str], gets: int
) -> dict[str, list[float] | list[int]]:
    """Search p50/p99 (with hits per query) and get latency, in-process, after a warm-up."""
    with open_service(load_config(env=setup.env)) as service:
        caller = InProcessCaller(service, HostSigningKey.from_pem_file(setup.signing_key))
        record_ids: list[str] = []

        async def search(query: str) -> int:
            value = caller.call("search", {"query": query, "purpose_ref": BINDING.purpose_ref})
            record_ids.extend(r["record"]["record_id"] for r in value["records"])
            return len(value["records"])

        searches, hits = anyio.run(timed_calls, search, list(queries), "in-process search")
        targets = list(dict.fromkeys(record_ids))[:gets]
        get_latencies: list[float] = []
        for record_id in targets:
            start = time.perf_counter()
            caller.call("get", {"record_id": record_id, "purpose_ref": BINDING.purpose_ref})
            get_latencies.append((time.perf_counter() - start) * 1000)
    return {"search": searches, "hits": hits, "get": get_latencies}


async def _stdio(setup: EngramSetup, queries: Sequence[str], log: Path) -> dict[str, Any]:
    params = quiet_server(sys.executable, _SERVE, setup.env, log)
    signer = HostSigningKey.from_pem_file(setup.signing_key)
    # The handshake era, as desktop clients speak it: `serve` opens (and checks) the loaded
    # store before it answers, which on a loaded 2-core machine can outlast the SDK's 10 s
    # `server/discover` probe; the server then refuses the fallback initialize. Only the
    # searches after the handshake are measured, so the era does not change the figures.
    async with connect(params, signer, BINDING, mode="legacy") as host:

        async def search(query: str) -> int:
            outcome = await host.call(
                "engram_memory_search", {"query": query, "purpose_ref": BINDING.purpose_ref}
            )
            if not outcome.envelope.get("ok"):
                raise RuntimeError(f"search failed: {outcome.envelope['error']['code']}")
            return len(outcome.envelope["output"]["value"]["records"])

        latencies, hits = await timed_calls(search, queries, "stdio search")
        rss = tree_rss_bytes(server_pid("engram_memory.cli"))
    return {"search": latencies, "hits": hits, "rss bytes": rss}


def measure_stdio(setup: EngramSetup, queries: Sequence[str], log: Path) -> dict[str, Any]:
    """Search over stdio against a real `serve` process; its RSS after the queries."""
    result: dict[str, Any] = anyio.run(_stdio, setup, queries, log)
    return result


def data_bytes(setup: EngramSetup) -> int:
    """The data directory's size (DuckDB file, WAL, key files, anchor)."""
    return directory_bytes(setup.data_dir)
