"""Which revisions the decider accepts: pinned (one), or any the bundle service publishes
signed (fetched and verified once, backing off on failure); one revision per call; every
change handed to the audit listener before the new revision decides."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import PolicyStale
from engram_memory.policy.decider import AUTHZ_PATH, PolicyDecider
from engram_memory.policy.engine import BundleIdentity, EngineAnswer
from engram_memory.policy.revision_trust import (
    MAX_BACKOFF_SECONDS,
    MIN_BACKOFF_SECONDS,
    PinnedRevision,
    SignedRevisionTrust,
)
from tests.policy.conftest import fixed_clock, subject
from tests.policy.test_decider import AUTHZ_OK


def _identity(label: str, hex_digit: str) -> BundleIdentity:
    digest = "sha256:" + hex_digit * 64
    return BundleIdentity(revision=f"{label}+{digest}", digest=digest)


ONE = _identity("one", "1")
TWO = _identity("two", "2")
THREE = _identity("three", "3")


class SignatureInvalid(Exception):
    pass


@dataclass
class BundleService:
    """What the bundle service publishes: a verified identity, or a refusal."""

    published: BundleIdentity | None = TWO
    unreachable: bool = False
    fetches: int = 0

    def fetch(self) -> bytes:
        self.fetches += 1
        if self.unreachable:
            raise OSError("connection refused")
        return b"tarball"

    def verify(self, tar_bytes: bytes) -> BundleIdentity:
        assert tar_bytes == b"tarball"
        if self.published is None:
            raise SignatureInvalid("unsigned")
        return self.published


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Listener:
    accept: bool = True
    changes: list[tuple[BundleIdentity, BundleIdentity]] = field(default_factory=list)

    def __call__(self, previous: BundleIdentity, current: BundleIdentity) -> bool:
        if self.accept:
            self.changes.append((previous, current))
        return self.accept


def _trust(
    service: BundleService, clock: Clock, *, startup_trusted: bool = True
) -> SignedRevisionTrust:
    return SignedRevisionTrust(
        ONE,
        fetch=service.fetch,
        verify=service.verify,
        startup_trusted=startup_trusted,
        clock=clock,
    )


def _stale(trust: SignedRevisionTrust | PinnedRevision, revision: str) -> None:
    with pytest.raises(PolicyStale) as caught:
        trust.identity_for(revision)
    assert caught.value.code is ErrorCode.POLICY_STALE


def test_a_pinned_revision_trusts_its_own_revision_only() -> None:
    pinned = PinnedRevision(ONE)
    assert pinned.identity_for(ONE.revision) == ONE
    _stale(pinned, TWO.revision)
    assert pinned.current == ONE


def test_a_published_signed_revision_is_fetched_once_trusted_and_audited_as_a_change() -> None:
    service, listener = BundleService(), Listener()
    trust = _trust(service, Clock())
    trust.follow(listener)
    assert trust.identity_for(ONE.revision) == ONE
    assert service.fetches == 0  # the startup bundle was signed: no fetch for it
    assert trust.identity_for(TWO.revision) == TWO
    assert trust.identity_for(TWO.revision) == TWO
    assert service.fetches == 1
    assert trust.current == TWO
    assert listener.changes == [(ONE, TWO)]


def test_going_back_to_a_verified_revision_needs_no_fetch_and_is_audited() -> None:
    service, listener = BundleService(), Listener()
    trust = _trust(service, Clock())
    trust.follow(listener)
    trust.identity_for(TWO.revision)
    assert trust.identity_for(ONE.revision) == ONE
    assert service.fetches == 1
    assert listener.changes == [(ONE, TWO), (TWO, ONE)]


def test_an_unsigned_startup_bundle_is_not_trusted_until_verified() -> None:
    service = BundleService(published=None)
    trust = _trust(service, Clock(), startup_trusted=False)
    _stale(trust, ONE.revision)
    assert service.fetches == 1


@pytest.mark.parametrize("failure", ["unreachable", "unsigned"])
def test_an_unverifiable_revision_is_stale_and_refetched_only_after_back_off(
    failure: str,
) -> None:
    service = BundleService(unreachable=failure == "unreachable")
    if failure == "unsigned":
        service.published = None
    clock = Clock()
    trust = _trust(service, clock)
    _stale(trust, TWO.revision)
    for _ in range(5):  # calls within the back-off cost no fetch
        _stale(trust, TWO.revision)
    assert service.fetches == 1
    clock.now += MIN_BACKOFF_SECONDS
    _stale(trust, TWO.revision)
    assert service.fetches == 2
    clock.now += MIN_BACKOFF_SECONDS  # the delay doubled: not due yet
    _stale(trust, TWO.revision)
    assert service.fetches == 2
    assert trust.current == ONE


def test_the_back_off_is_bounded_and_a_success_resets_it() -> None:
    service = BundleService(unreachable=True)
    clock = Clock()
    trust = _trust(service, clock)
    for _ in range(12):
        _stale(trust, TWO.revision)
        clock.now += MAX_BACKOFF_SECONDS
    assert service.fetches == 12  # each due after at most MAX_BACKOFF_SECONDS
    service.unreachable = False
    assert trust.identity_for(TWO.revision) == TWO
    service.published = THREE
    service.unreachable = True
    _stale(trust, THREE.revision)
    clock.now += MIN_BACKOFF_SECONDS
    _stale(trust, THREE.revision)
    assert service.fetches == 15


def test_a_revision_other_than_the_published_one_is_stale_but_the_published_one_is_kept() -> None:
    service = BundleService(published=THREE)
    trust = _trust(service, Clock())
    _stale(trust, TWO.revision)
    assert trust.identity_for(THREE.revision) == THREE  # signed: trusted without a fetch
    assert service.fetches == 1


def test_a_change_the_listener_cannot_record_is_not_made() -> None:
    service, listener = BundleService(), Listener(accept=False)
    trust = _trust(service, Clock())
    trust.follow(listener)
    _stale(trust, TWO.revision)
    assert trust.current == ONE
    listener.accept = True
    assert trust.identity_for(TWO.revision) == TWO
    assert listener.changes == [(ONE, TWO)]


@dataclass
class RollingEngine:
    """Answers authz from revision `revisions[i]` on the i-th evaluation."""

    revisions: list[str]
    engine_id: str = "fake"
    engine_version: str = "0"
    calls: int = 0

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        revision = self.revisions[min(self.calls, len(self.revisions) - 1)]
        self.calls += 1
        return EngineAnswer(result=AUTHZ_OK, revision=revision)

    def close(self) -> None:
        pass


def test_decisions_of_one_call_straddling_a_rollout_are_stale() -> None:
    engine = RollingEngine([ONE.revision, TWO.revision])
    decider = PolicyDecider(engine, _trust(BundleService(), Clock()), fixed_clock)
    with decider.one_revision_per_call():
        first = decider.authz(subject(), "engram_memory_search")
        assert decider.expected == ONE
        with pytest.raises(PolicyStale):
            decider.authz(subject(), "engram_memory_search")
    assert first.decision.receipt.bundle_digest == ONE.digest


def test_receipts_bind_the_digest_of_the_verified_revision_that_decided() -> None:
    engine = RollingEngine([TWO.revision])
    decider = PolicyDecider(engine, _trust(BundleService(), Clock()), fixed_clock)
    with decider.one_revision_per_call():
        result = decider.authz(subject(), "engram_memory_search")
        assert decider.expected == TWO
    assert result.decision.path == AUTHZ_PATH
    assert (result.decision.receipt.bundle_revision, result.decision.receipt.bundle_digest) == (
        TWO.revision,
        TWO.digest,
    )
    # Outside a call, `expected` is the revision in use.
    assert decider.expected == TWO
