"""Per-decision latency of both policy engines on the shipped bundle (p50/p99).

Usage: .venv/bin/python -m bench.policy_engines [N]   (default N=2000 per domain)

For each domain, one representative input is evaluated N times sequentially after 100
warm-up calls, through the engine alone (`engine.evaluate`) and through the decider
(strict parsing + receipt). The OPA server is a real `opa run --server` on 127.0.0.1
(needs the OPA binary), queried with provenance over keep-alive HTTP.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench.report import RESULTS, write_report
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR, load_bundle_identity
from engram_memory.policy.decider import AdmissionCandidate, PolicyDecider, Subject
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import PolicyEngine
from engram_memory.policy.opa_server import OpaServerEngine, start_opa_server

NOW = 1_767_225_600_000
ALICE = Subject("acme", "support", "user:alice", "agent:bench", "purpose:support-case", "host:b")
CANDIDATE = AdmissionCandidate(
    candidate_id="candidate_" + "0" * 64,
    payload_digest="sha256:" + "a" * 64,
    record_digest="sha256:" + "b" * 64,
    evidence_ref="evidence:ticket/1",
    evidence_digest="sha256:" + "c" * 64,
    component_kinds=("decision",),
    citation_count=2,
    source_refs=("source:case",),
    has_attestation=False,
)


def _calls(decider: PolicyDecider) -> dict[str, Callable[[], object]]:
    return {
        "discovery": lambda: decider.discovery(ALICE, True),
        "authz": lambda: decider.authz(ALICE, "engram_memory_search"),
        "confirmation": lambda: decider.confirmation(ALICE, "engram_memory_capture"),
        "retention": lambda: decider.retention(ALICE, NOW, "make-ineligible", None),
        "reconciliation": lambda: decider.reconciliation(ALICE, ["family:support-case-notes"]),
        "admission": lambda: decider.admission(ALICE, CANDIDATE, NOW),
    }


def _samples(call: Callable[[], object], n: int) -> list[float]:
    for _ in range(100):
        call()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


class _Recording:
    """Wraps an engine to time `evaluate` alone inside decider calls."""

    def __init__(self, engine: PolicyEngine) -> None:
        self.inner = engine
        self.engine_id = engine.engine_id
        self.engine_version = engine.engine_version
        self.last: tuple[str, dict[str, object]] | None = None

    def evaluate(self, path: str, policy_input: dict[str, object]) -> object:
        self.last = (path, dict(policy_input))
        return self.inner.evaluate(path, policy_input)


def bench(name: str, engine: PolicyEngine, n: int) -> dict[str, dict[str, list[float]]]:
    """Samples (µs) of `engine.evaluate` alone and of the full decider call, per domain."""
    identity = load_bundle_identity(DEFAULT_BUNDLE_DIR)
    decider = PolicyDecider(engine, identity, lambda: NOW)
    recorder = _Recording(engine)
    probe = PolicyDecider(recorder, identity, lambda: NOW)  # type: ignore[arg-type]
    raw: dict[str, list[float]] = {}
    full: dict[str, list[float]] = {}
    for domain, call in _calls(decider).items():
        print(f"  {name}: {domain}", file=sys.stderr, flush=True)
        _calls(probe)[domain]()
        assert recorder.last is not None
        path, policy_input = recorder.last
        raw[domain] = _samples(partial(engine.evaluate, path, policy_input), n)
        full[domain] = _samples(call, n)
    return {f"{name}: engine.evaluate": raw, f"{name}: decider (parse + receipt)": full}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Policy decision latency per engine")
    parser.add_argument("n", nargs="?", type=int, default=2000, help="decisions per domain")
    parser.add_argument("--out", default=str(RESULTS), help="results directory")
    args = parser.parse_args(argv)
    n = args.n
    series: dict[str, dict[str, list[float]]] = {}
    embedded = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR)
    try:
        series.update(bench("embedded wasm", embedded, n))
    finally:
        embedded.close()
    with start_opa_server(DEFAULT_BUNDLE_DIR / "bundle.tar.gz") as url:
        server = OpaServerEngine(url)
        try:
            series.update(bench("opa server", server, n))
        finally:
            server.close()
    print(
        write_report(
            "policy_engines",
            "Policy decision latency per engine",
            f"bench/policy_engines.py {n}",
            series,
            "µs",
            Path(args.out),
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
