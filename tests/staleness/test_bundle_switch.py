"""POLICY_STALE when the real OPA server serves another bundle revision than the service
expects (DESIGN "The path of one call" 3; SPEC §5), and no stranding of candidates captured
under an older bundle (SPEC §4.4 rule 3).

OPA is a real `opa run --server` whose bundle is switched while it runs (conftest).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.runtime import Services
from engram_memory.crypto.keys import RootKey
from engram_memory.policy.decider import ADMISSION_PATH
from engram_memory.policy.engine import EngineAnswer, PolicyEngine
from engram_memory.policy.opa_server import OpaServerEngine
from tests.harness import Caller
from tests.harness import error_of as _error
from tests.harness import fresh_key as _key
from tests.harness import ok_value as _value
from tests.staleness.conftest import Bundle, WatchedOpa, memory_service

pytestmark = pytest.mark.opa

CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
SCOPE = "tenant:acme/workspace:support"


def _journal_length(services: Services) -> int:
    with services.database.transaction() as tx:
        row = tx.fetchone("SELECT count(*) FROM journal_events WHERE scope_ref = ?", [SCOPE])
    assert row is not None
    return int(row[0])


def _candidate_state(services: Services, candidate_id: str) -> str:
    with services.database.transaction() as tx:
        row = tx.fetchone(
            "SELECT state FROM candidates WHERE scope_ref = ? AND candidate_id = ?",
            [SCOPE, candidate_id],
        )
    assert row is not None
    return str(row[0])


class SwitchBeforePath:
    """A `PolicyEngine` over the real OPA engine that, just before the first evaluation of
    `path`, has the operator switch OPA's bundle: the switch lands mid-call."""

    def __init__(self, inner: OpaServerEngine, path: str, switch: Callable[[], None]) -> None:
        self._inner = inner
        self._path = path
        self._switch: Callable[[], None] | None = switch
        self.seen: list[tuple[str, str]] = []

    @property
    def engine_id(self) -> str:
        return self._inner.engine_id

    @property
    def engine_version(self) -> str:
        return self._inner.engine_version

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        if path == self._path and self._switch is not None:
            switch, self._switch = self._switch, None
            switch()
        answer = self._inner.evaluate(path, policy_input)
        self.seen.append((path, answer.revision))
        return answer

    def close(self) -> None:
        self._inner.close()


def test_opa_switching_revision_between_calls_is_policy_stale_until_switched_back(
    tmp_path: Path, watched_opa: WatchedOpa, bundle_a: Bundle, bundle_b: Bundle
) -> None:
    assert bundle_a.identity.revision != bundle_b.identity.revision
    engine = OpaServerEngine(watched_opa.url)
    root_key = RootKey(os.urandom(32))
    with memory_service(tmp_path / "data", root_key, engine, bundle_a.identity) as (svc, services):
        alice = Caller(svc)
        candidate_id = _value(alice.call(CAPTURE, demo_capture_arguments("Ok.", _key("c"))))[
            "candidate_id"
        ]
        admit_args = {"candidate_id": candidate_id, "idempotency_key": _key("admit")}
        written = _journal_length(services)

        watched_opa.serve(bundle_b)
        assert _error(alice.call(ADMIT, admit_args)) == ("POLICY_STALE", True)
        capture_args = demo_capture_arguments("Not now.", _key("c"))
        assert _error(alice.call(CAPTURE, capture_args)) == ("POLICY_STALE", True)
        assert _journal_length(services) == written
        assert _candidate_state(services, candidate_id) == "pending"

        watched_opa.serve(bundle_a)
        # The same key and arguments: the stale attempt bound nothing.
        outcome = _value(alice.call(ADMIT, admit_args))["outcome"]
        assert outcome["status"] == "accepted"
        assert _value(alice.call(CAPTURE, capture_args))["status"] == "committed_pending"
    engine.close()


def test_opa_switching_revision_in_the_middle_of_a_call_is_policy_stale_and_writes_nothing(
    tmp_path: Path, watched_opa: WatchedOpa, bundle_a: Bundle, bundle_b: Bundle
) -> None:
    engine = SwitchBeforePath(
        OpaServerEngine(watched_opa.url), ADMISSION_PATH, lambda: watched_opa.serve(bundle_b)
    )
    checked: PolicyEngine = engine  # the wrapper is a full PolicyEngine
    root_key = RootKey(os.urandom(32))
    with memory_service(tmp_path / "data", root_key, checked, bundle_a.identity) as (
        svc,
        services,
    ):
        alice = Caller(svc)
        captured = _value(alice.call(CAPTURE, demo_capture_arguments("Ok.", _key("c"))))
        admit_args = {"candidate_id": captured["candidate_id"], "idempotency_key": _key("admit")}
        written = _journal_length(services)
        engine.seen.clear()

        assert _error(alice.call(ADMIT, admit_args)) == ("POLICY_STALE", True)
        # Discovery, gate and authorization of this very call were decided by A; the
        # admission decision came from B and was refused.
        earlier = {revision for path, revision in engine.seen if path != ADMISSION_PATH}
        assert earlier == {bundle_a.identity.revision}
        assert engine.seen[-1] == (ADMISSION_PATH, bundle_b.identity.revision)
        assert _journal_length(services) == written
        assert _candidate_state(services, captured["candidate_id"]) == "pending"

        watched_opa.serve(bundle_a)
        outcome = _value(alice.call(ADMIT, admit_args))["outcome"]
        assert outcome["status"] == "accepted"
    engine.close()


def _admission_receipts(services: Services) -> list[tuple[str, str]]:
    """(bundle revision, bundle digest) of the admission-policy receipt of every successful
    admission call, joined through the call's audit entry."""
    with services.database.transaction() as tx:
        rows = tx.fetchall(
            "SELECT r.bundle_revision, r.bundle_digest FROM decision_receipts r "
            "JOIN audit_entries a ON a.audit_id = r.audit_id "
            "WHERE a.tool = ? AND a.outcome = 'ok' AND r.policy_path = ?",
            [ADMIT, ADMISSION_PATH],
        )
    return [(str(revision), str(digest)) for revision, digest in rows]


def _audited_revisions(services: Services, tool: str) -> set[str]:
    with services.database.transaction() as tx:
        rows = tx.fetchall(
            "SELECT DISTINCT bundle_revision FROM audit_entries WHERE tool = ? AND outcome = 'ok'",
            [tool],
        )
    return {str(row[0]) for row in rows}


def test_candidate_captured_under_an_older_bundle_is_decided_by_the_current_one(
    tmp_path: Path, watched_opa: WatchedOpa, bundle_a: Bundle, bundle_b: Bundle
) -> None:
    data_dir, root_key = tmp_path / "data", RootKey(os.urandom(32))
    engine = OpaServerEngine(watched_opa.url)
    with memory_service(data_dir, root_key, engine, bundle_a.identity) as (svc, services):
        captured = _value(
            Caller(svc).call(CAPTURE, demo_capture_arguments("Refund approved.", _key("c")))
        )
        assert _audited_revisions(services, CAPTURE) == {bundle_a.identity.revision}

    # Redeploy: the service restarts expecting B, and OPA serves B.
    with memory_service(data_dir, root_key, engine, bundle_b.identity) as (svc, services):
        alice = Caller(svc)
        admit_args = {"candidate_id": captured["candidate_id"], "idempotency_key": _key("a")}
        # Until OPA serves B too, the restarted service refuses A's decisions.
        assert _error(alice.call(ADMIT, admit_args)) == ("POLICY_STALE", True)
        watched_opa.serve(bundle_b)

        outcome = _value(alice.call(ADMIT, admit_args))["outcome"]
        assert outcome["status"] == "accepted"
        assert outcome["candidate_id"] == captured["candidate_id"]
        assert _admission_receipts(services) == [
            (bundle_b.identity.revision, bundle_b.identity.digest)
        ]
        assert _audited_revisions(services, ADMIT) == {bundle_b.identity.revision}
    engine.close()
