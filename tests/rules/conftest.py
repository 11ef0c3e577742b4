"""Fixtures for the rule tests: a service whose clocks (call clock and policy clock) are one
controllable clock, so time-bound rules are tested at their exact edges without sleeping."""

from __future__ import annotations

import time

import pytest

from engram_memory.core.runtime import Services
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.tools.dispatch import MemoryService
from tests.rules.steps import Clock, ClockedCaller


@pytest.fixture
def clock(services: Services, engine: EmbeddedWasmEngine) -> Clock:
    """One clock for the service, the policy decider and the tokens the caller mints."""
    shared = Clock(time.time_ns() // 1_000_000)
    services.clock_ms = shared
    services.decider = PolicyDecider(engine, engine.identity, shared)
    return shared


@pytest.fixture
def timed_alice(services: Services, clock: Clock) -> ClockedCaller:
    """alice (steward of acme/support), calling at the controllable clock's time."""
    return ClockedCaller(MemoryService(services), clock=clock)
