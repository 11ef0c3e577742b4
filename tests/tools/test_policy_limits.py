"""Limits that compliance authors set in policy data: extra never-store shapes (SPEC §11)
and rate limits (SPEC §12), through the real embedded engine and the shipped policies."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.rate_limits import RateLimiter
from engram_memory.core.runtime import Services
from engram_memory.policy.decider import RateLimit
from engram_memory.tools.dispatch import MemoryService
from tests.harness import Caller
from tests.tools.test_tool_rules import CAPTURE, _key, code, high_water, value

GLOBEX = "tenant:globex/workspace:main"
UNKNOWN = "mem_" + "a" * 52


def test_a_tenant_secret_shape_from_policy_data_is_refused_and_nothing_is_written(
    alice: Caller, services: Services
) -> None:
    """policies/acme.yaml adds door access codes; globex does not."""
    text = "The side door code is ACME-DAC-204918, rotate it monthly."
    before = high_water(services)
    refused = alice.call(CAPTURE, demo_capture_arguments(text, _key()))
    assert code(refused) == "INVALID_SCHEMA"
    assert "204918" not in str(refused)
    assert high_water(services) == before
    carol = alice.as_(tenant="globex", workspace="main", principal="user:carol")
    accepted = value(carol.call(CAPTURE, demo_capture_arguments(text, _key())))
    assert accepted["status"] == "committed_pending"
    assert high_water(services, GLOBEX) == 1


def test_the_audit_names_the_never_store_pattern_that_refused_never_the_text(
    alice: Caller, services: Services
) -> None:
    """Issue 22 item 3: an author reading the audit learns which pattern fired."""
    door = "The side door code is ACME-DAC-204918, rotate it monthly."
    built_in = "Use password=Hunter42x for the staging box."
    for text in (door, built_in):
        assert code(alice.call(CAPTURE, demo_capture_arguments(text, _key()))) == "INVALID_SCHEMA"
    with services.database.reading() as tx:
        rows = tx.fetchall(
            "SELECT detail FROM audit_entries WHERE tool = ? ORDER BY sequence", [CAPTURE]
        )
    assert [detail for (detail,) in rows] == [
        "arguments:never_store:acme-door-access-code",
        "arguments:never_store",
    ]


class _Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clocked(services: Services) -> Iterator[tuple[MemoryService, _Clock]]:
    # A little ahead of the wall clock, so that contexts minted meanwhile are not "future".
    clock = _Clock(services.clock_ms() + 5_000)
    service = MemoryService(dataclasses.replace(services, clock_ms=clock))
    yield service, clock
    service.close()  # refusal summaries still owed, while the store is open


def test_a_policy_rate_limit_refuses_the_call_beyond_it_until_the_bucket_refills(
    clocked: tuple[MemoryService, _Clock],
) -> None:
    """acme/support: readers get 120 calls a minute (policies/acme.yaml)."""
    service, clock = clocked
    bob = Caller(service, principal="user:bob")
    alice = Caller(service)
    get = {"record_id": UNKNOWN, "purpose_ref": bob.purpose_ref}
    for _ in range(120):
        assert code(bob.call("engram_memory_get", get)) == "NOT_FOUND"
    limited = bob.call("engram_memory_get", get)
    assert code(limited) == "RATE_LIMITED"
    assert limited["error"]["retriable"] is True
    assert code(alice.call("engram_memory_get", get)) == "NOT_FOUND"  # stewards: no limit
    clock.now_ms += 500  # 120 per 60 s refills one call per 500 ms
    assert code(bob.call("engram_memory_get", get)) == "NOT_FOUND"
    assert code(bob.call("engram_memory_get", get)) == "RATE_LIMITED"


def test_a_rate_limited_call_is_audited_as_such(
    clocked: tuple[MemoryService, _Clock], services: Services
) -> None:
    service, _ = clocked
    bob = Caller(service, principal="user:bob")
    get = {"record_id": UNKNOWN, "purpose_ref": bob.purpose_ref}
    for _ in range(121):
        bob.call("engram_memory_get", get)
    with services.database.transaction() as tx:
        outcomes = tx.fetchall("SELECT outcome, count(*) FROM audit_entries GROUP BY outcome")
    assert dict(outcomes) == {"NOT_FOUND": 120, "RATE_LIMITED": 1}


def test_a_rate_limit_applies_before_the_arguments_are_validated(
    clocked: tuple[MemoryService, _Clock],
) -> None:
    """A storm of malformed calls is limited like any other (issue 9)."""
    service, _ = clocked
    bob = Caller(service, principal="user:bob")
    malformed = {"record_id": UNKNOWN, "purpose_ref": bob.purpose_ref, "extra": 1}
    for _ in range(120):
        assert code(bob.call("engram_memory_get", malformed)) == "INVALID_SCHEMA"
    assert code(bob.call("engram_memory_get", malformed)) == "RATE_LIMITED"


BURST = RateLimit("burst", calls=2, per_ms=1_000)
HOURLY = RateLimit("hourly", calls=3, per_ms=3_600_000)


def test_a_call_takes_a_token_from_every_limit_or_from_none() -> None:
    limiter = RateLimiter()
    both = (BURST, HOURLY)
    assert limiter.admit("s", "p", both, 0) is None
    assert limiter.admit("s", "p", both, 0) is None
    assert limiter.admit("s", "p", both, 0) == "burst"  # hourly keeps its last token
    assert limiter.admit("s", "p", both, 1_000) is None
    assert limiter.admit("s", "p", both, 2_000) == "hourly"
    assert limiter.admit("s", "p", (BURST,), 2_000) is None  # burst was not charged


def test_buckets_are_per_scope_and_principal_and_a_clock_step_back_refills_nothing() -> None:
    limiter = RateLimiter()
    for _ in range(2):
        assert limiter.admit("s", "p", (BURST,), 5_000) is None
    assert limiter.admit("s", "p", (BURST,), 5_000) == "burst"
    assert limiter.admit("s", "q", (BURST,), 5_000) is None
    assert limiter.admit("t", "p", (BURST,), 5_000) is None
    assert limiter.admit("s", "p", (BURST,), 1_000) == "burst"


def test_a_changed_rule_starts_a_fresh_bucket() -> None:
    limiter = RateLimiter()
    for _ in range(2):
        limiter.admit("s", "p", (BURST,), 0)
    assert limiter.admit("s", "p", (BURST,), 0) == "burst"
    assert limiter.admit("s", "p", (dataclasses.replace(BURST, calls=5),), 0) is None
