"""The import workers' decider (bulk/decisions.py): a decision asked again with the very same
input within a chunk gets a receipt of its own, whose input and result digests are exactly
what a fresh decision mints, without asking the engine again; `forget` starts a new chunk."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engram_memory.bulk.decisions import ChunkDecisions
from engram_memory.contract.receipts import receipt_digest_of
from engram_memory.policy.decider import PolicyDecider, Subject
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import EngineAnswer

CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
SUBJECT = Subject(
    tenant="acme",
    workspace="support",
    principal="user:alice",
    agent_id="host:import",
    purpose_ref="purpose:support-case",
    host_id="host:import",
)


class CountingEngine:
    """The embedded engine, counting the evaluations it is asked for."""

    def __init__(self, inner: EmbeddedWasmEngine) -> None:
        self.inner = inner
        self.engine_id = inner.engine_id
        self.engine_version = inner.engine_version
        self.asked = 0

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        self.asked += 1
        return self.inner.evaluate(path, policy_input)


def test_a_repeated_decision_gets_its_own_receipt_with_the_digests_a_fresh_one_has(
    engine: EmbeddedWasmEngine,
) -> None:
    counting = CountingEngine(engine)
    clock = iter(range(1_000, 2_000))
    decider = ChunkDecisions(counting, engine.identity, lambda: next(clock))
    first = decider.authz(SUBJECT, CAPTURE).decision.receipt
    again = decider.authz(SUBJECT, CAPTURE)
    second = again.decision.receipt
    assert counting.asked == 1
    assert again.allow
    assert second.decision_id != first.decision_id
    assert second.decided_at_ms == first.decided_at_ms + 1
    assert second.receipt_digest == receipt_digest_of(second.body()) != first.receipt_digest
    fresh = PolicyDecider(engine, engine.identity, lambda: 0).authz(SUBJECT, CAPTURE)
    assert (second.input_digest, second.result_digest) == (
        fresh.decision.receipt.input_digest,
        fresh.decision.receipt.result_digest,
    )


def test_another_input_and_a_new_chunk_ask_the_engine_again(engine: EmbeddedWasmEngine) -> None:
    counting = CountingEngine(engine)
    decider = ChunkDecisions(counting, engine.identity, lambda: 0)
    decider.authz(SUBJECT, CAPTURE)
    other = decider.authz(SUBJECT, ADMIT)
    assert counting.asked == 2
    assert other.decision.policy_input["tool"] == ADMIT
    decider.authz(SUBJECT, CAPTURE)  # remembered
    assert counting.asked == 2
    decider.forget()
    decider.authz(SUBJECT, CAPTURE)
    assert counting.asked == 3
