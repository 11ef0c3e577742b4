"""Random sequences of the six tools and of host maintenance (adjudication, the record
operations, expiry, inspection) over two tenants agree with a pure-Python model.

The model is tests/model/model.py (what agents see) and tests/model/maintenance_model.py
(what operators see), the rules tests/model/machine.py (agents) and tests/model/admin_rules.py
(operators), the check after every step `LifecycleMachine.the_store_matches_the_model`.
A fresh store per sequence is too slow, so sequences share stores (tests/model/stores.py,
renewed every SEQUENCES_PER_STORE sequences). They are isolated by their own search word,
idempotency keys and content, and cursors are checked relative to the journal heads read
when a sequence starts; the stores' clock only moves forward (expiry, see
`MaintenanceRules.time_passes`). `ENGRAM_MODEL_EXAMPLES` sets how many sequences run
(default 100 in CI; the full profile, 500 and more, is a documented command in
docs/development/testing.md);
`ENGRAM_MODEL_STATS=1 pytest -s` prints what they exercised. Budget (this 2-core box): about
20 ms per tool call and 10 ms per operator call, ~10 steps per sequence, so ~25 s for the
default 100 sequences and ~120 s for 500 (1.2 times the six tools alone).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.tools.dispatch import MemoryService
from tests.harness import Caller
from tests.model.checks import OUTCOMES
from tests.model.machine import LifecycleMachine
from tests.model.scopes import (
    ACME,
    ADMIT,
    CAPTURE,
    FORGET,
    GET,
    GLOBEX,
    PURPOSE,
    SEARCH,
    WITHDRAW,
    ScopeSpec,
    canonical,
    capture_arguments,
)
from tests.model.stores import Stores

# CI runs the defaults: 100 fixed sequences keep the whole suite within its 10-minute budget.
# The full profile (docs/development/testing.md): ENGRAM_MODEL_EXAMPLES=500, or e.g. 5000 with
# ENGRAM_MODEL_STEPS=25 ENGRAM_MODEL_RANDOM=1 (fresh random sequences instead of the fixed set).
EXAMPLES = int(os.environ.get("ENGRAM_MODEL_EXAMPLES", "100"))
STEPS = int(os.environ.get("ENGRAM_MODEL_STEPS", "10"))
SEQUENCES_PER_STORE = 25
SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    derandomize=not os.environ.get("ENGRAM_MODEL_RANDOM"),
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

POLICIES = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture
def stores(engine: EmbeddedWasmEngine) -> Iterator[Stores]:
    pool = Stores(engine, rotate_every=SEQUENCES_PER_STORE)
    yield pool
    pool.close()


def test_random_tool_sequences_over_two_tenants_match_the_model(stores: Stores) -> None:
    # Seed NOT_FOUND with an unknown target: every foreign one must be byte-identical to it.
    unknown = Caller(MemoryService(stores.next())).call(
        GET, {"record_id": "mem_" + "a" * 52, "purpose_ref": PURPOSE}
    )
    assert unknown["error"]["code"] == "NOT_FOUND"
    error_objects = {"NOT_FOUND": canonical(unknown["error"])}
    machine = type(
        "BoundLifecycleMachine",
        (LifecycleMachine,),
        {"stores": stores, "error_objects": error_objects},
    )
    OUTCOMES.clear()
    run_state_machine_as_test(machine, settings=SETTINGS)
    if os.environ.get("ENGRAM_MODEL_STATS"):
        print(f"\n{stores.opened} stores")
        for label, count in sorted(OUTCOMES.items()):
            print(f"{count:6d}  {label}")


@pytest.mark.parametrize("spec", [ACME, GLOBEX], ids=lambda spec: spec.name)
def test_the_model_agrees_with_the_shipped_policy_data(spec: ScopeSpec) -> None:
    """If policies/*.yaml change, the model must change with them (and this says so)."""
    data = yaml.safe_load((POLICIES / f"{spec.tenant}.yaml").read_text(encoding="utf-8"))
    workspace = data["workspaces"][spec.workspace]
    admission = workspace["admission"]
    assert tuple(admission.get("reject", {}).get("evidence_ref_prefixes", [])) == (
        spec.reject_prefixes
    )
    adjudicate = admission.get("adjudicate", {})
    assert tuple(adjudicate.get("component_kinds", [])) == spec.adjudicate_kinds
    assert "min_citations" not in adjudicate
    source_ref = capture_arguments("w", 0, "ticket", "k" * 16, 0)["payload"]["citations"][0][
        "source_ref"
    ]
    assert not any(source_ref.startswith(p) for p in adjudicate.get("source_ref_prefixes", []))
    assert tuple(admission["accept"]["evidence_ref_prefixes"]) == spec.accept_prefixes
    assert not admission["accept"].get("require_attestation", False)
    assert admission.get("otherwise", "adjudication_required") == "adjudication_required"
    # Expiry: the workspace's default TTL (no explicit expires_at is ever captured), and
    # who may maintain or read.
    default_ttl = workspace.get("retention", {}).get("default_ttl")
    assert default_ttl == (None if spec.default_ttl_days is None else f"{spec.default_ttl_days}d")
    operators = workspace["maintenance"]["operators"]
    assert {human: tuple(held) for human, held in operators.items()} == dict(spec.operators)
    # The caller holds all six tools, and no confirmation is asked of it for capture or
    # admission (withdraw and forget always need one; the machine supplies it).
    grants = [g for g in workspace["grants"] if g.get("principal") == spec.principal]
    roles = {role for grant in grants for role in grant["roles"]}
    assert {tool for role in roles for tool in workspace["roles"][role]} == {
        SEARCH,
        GET,
        CAPTURE,
        ADMIT,
        WITHDRAW,
        FORGET,
    }
    for selector in workspace.get("confirmation", {}).get("require", []):
        assert selector.get("roles") or selector.get("principals"), "selects everyone"
        assert not roles & set(selector.get("roles", []))
        assert spec.principal not in selector.get("principals", [])
