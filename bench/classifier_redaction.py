"""What classifier-aware redaction costs a search page (issue 22 item 1).

Usage: python -m bench.classifier_redaction [--rounds 30] [--out DIR]

In-process, on a real DuckDB file with the embedded Wasm engine and the shipped bundle, a
search returning a page of 20 records (each ~200 bytes of text), as:

- `support, no classifiers`: the workspace defines none, so nothing is classified and the
  call decides its redaction once, as before classifiers;
- `accounts, no record matched`: every record is classified, nothing matched, the call
  still decides once (the decision asked with `classifiers: {}`);
- `accounts, all 20 matched customer`: every record matched the same way: one more
  authorization decision for the page, not 20.

The machine load (`uptime`) is recorded before and after.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.hot_path import PURPOSE, SIGNER, _services
from bench.report import RESULTS, machine_load, percentile, write_report
from engram_memory.admin.maintenance import MaintenanceService, Operator
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.host.context import mint_invocation
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.tools.dispatch import CallRequest, MemoryService

PAGE = 20
FILLER = "The courier confirmed the pickup window and the parcel was scanned at the depot. " * 2


def _call(
    service: MemoryService,
    workspace: str,
    principal: str,
    tool: str,
    args: dict[str, Any],
    groups: tuple[str, ...] = (),
) -> dict[str, Any]:
    token = mint_invocation(
        SIGNER,
        host_id="host:bench",
        tenant="acme",
        workspace=workspace,
        principal=principal,
        agent_id="agent:bench",
        session="session:bench",
        purpose_ref=PURPOSE,
        audit_id=f"audit:{uuid.uuid4().hex}",
        groups=list(groups) or None,
    )
    envelope = service.call_tool(CallRequest(tool, args, token))
    assert envelope["ok"] is True, envelope.get("error")
    value: dict[str, Any] = envelope["output"]["value"]
    return value


def _record(service: MemoryService, admin: MaintenanceService, workspace: str, text: str) -> None:
    """One accepted record (a held one is accepted by the workspace's operator)."""
    args = demo_capture_arguments(text, f"bench-{uuid.uuid4().hex}")
    captured = _call(service, workspace, "user:alice", "engram_memory_capture", args)
    admitted = _call(
        service,
        workspace,
        "user:alice",
        "engram_memory_request_admission",
        {"candidate_id": captured["candidate_id"], "idempotency_key": f"k-{uuid.uuid4().hex}"},
    )
    if admitted["outcome"]["status"] == "pending_adjudication":
        dana = Operator("acme", workspace, "human:dana")
        admin.adjudicate(dana, captured["candidate_id"], "accept", "reason:bench")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = machine_load()
    engine = EmbeddedWasmEngine()
    series: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        services = _services(Path(tmp) / "data", engine)
        service, admin = MemoryService(services), MaintenanceService(services)
        for index in range(PAGE):
            _record(service, admin, "support", f"alpha {index}. {FILLER}")
            _record(service, admin, "accounts", f"alpha {index}. {FILLER}")
            _record(service, admin, "accounts", f"beta {index}: the customer called. {FILLER}")
        print("store ready", file=sys.stderr)
        cases = {
            "support, no classifiers": ("support", "user:alice", (), "alpha"),
            "accounts, no record matched": (
                "accounts",
                "user:zoe",
                ("group:support-advisors",),
                "alpha",
            ),
            "accounts, all 20 matched customer": (
                "accounts",
                "user:zoe",
                ("group:support-advisors",),
                "beta customer",
            ),
        }
        for label, (workspace, principal, groups, query) in cases.items():
            search = {"query": query, "purpose_ref": PURPOSE, "limit": PAGE}
            page = _call(service, workspace, principal, "engram_memory_search", search, groups)
            assert len(page["records"]) == PAGE, (label, len(page["records"]))
            samples = []
            for _ in range(args.rounds):
                started = time.perf_counter_ns()
                _call(service, workspace, principal, "engram_memory_search", search, groups)
                samples.append((time.perf_counter_ns() - started) / 1e6)
            series[label] = samples
        service.close()
        services.database.close()
    engine.close()
    extra: dict[str, object] = {
        "load before": load_before,
        "load after": machine_load(),
        "page": f"{PAGE} records of ~{len(FILLER) + 30} characters, limit {PAGE}",
        **{
            f"{label} p50 / p90": f"{percentile(s, 0.5):.2f} / {percentile(s, 0.9):.2f} ms"
            for label, s in series.items()
        },
    }
    print(
        write_report(
            "classifier_redaction",
            "Classifier-aware redaction: a search page of 20",
            f"python -m bench.classifier_redaction --rounds {args.rounds}",
            {"search, page of 20": series},
            "ms",
            args.out,
            extra,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
