"""SPEC §4.4 rule 3: an admission decision issued in the future or older than 300,000 ms is
POLICY_STALE (retriable), never applied.

The admission policy stamps `issued_at_ms` with the `now_ms` it is given; the decider then
checks it against its own clock. A controllable clock moves "now" across both edges of the
window, with real policy engines: the OPA server and OPA's Wasm in-process.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import PolicyStale
from engram_memory.crypto.keys import RootKey
from engram_memory.policy.decider import (
    ADMISSION_MAX_AGE_MS,
    AdmissionCandidate,
    PolicyDecider,
    Subject,
)
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import PolicyEngine
from engram_memory.policy.opa_server import OpaServerEngine, start_opa_server
from tests.harness import Caller
from tests.staleness.conftest import Bundle, memory_service, real_clock_ms

pytestmark = pytest.mark.opa

ISSUED_AT = 1_780_000_000_000
ALICE = Subject(
    tenant="acme",
    workspace="support",
    principal="user:alice",
    agent_id="agent:t",
    purpose_ref="purpose:support-case",
    host_id="host:t",
)
CANDIDATE = AdmissionCandidate(
    candidate_id="candidate_" + "0" * 64,
    payload_digest="sha256:" + "1" * 64,
    record_digest="sha256:" + "2" * 64,
    evidence_ref="evidence:ticket/T-4711",
    evidence_digest="sha256:" + "3" * 64,
    component_kinds=("decision",),
    citation_count=1,
    source_refs=("source:helpdesk",),
    has_attestation=False,
)


@pytest.fixture(scope="module")
def opa_server_url(bundle_a: Bundle) -> Iterator[str]:
    with start_opa_server(bundle_a.tarball) as url:
        yield url


@pytest.fixture(params=["opa-server", "embedded"])
def real_engine(
    request: pytest.FixtureRequest, bundle_a: Bundle, engine: EmbeddedWasmEngine
) -> Iterator[PolicyEngine]:
    if request.param == "embedded":
        yield engine  # the session's embedded engine over the same shipped bundle
        return
    server = OpaServerEngine(request.getfixturevalue("opa_server_url"))
    yield server
    server.close()


def _decide_at(real_engine: PolicyEngine, bundle_a: Bundle, clock_ms: int) -> str:
    decider = PolicyDecider(real_engine, bundle_a.identity, lambda: clock_ms)
    return decider.admission(ALICE, CANDIDATE, ISSUED_AT).decision


@pytest.mark.parametrize("age_ms", [0, 1, ADMISSION_MAX_AGE_MS])
def test_admission_decision_within_the_window_is_used(
    real_engine: PolicyEngine, bundle_a: Bundle, age_ms: int
) -> None:
    assert _decide_at(real_engine, bundle_a, ISSUED_AT + age_ms) == "accept"


@pytest.mark.parametrize(
    "age_ms", [ADMISSION_MAX_AGE_MS + 1, 10 * ADMISSION_MAX_AGE_MS, -1, -ADMISSION_MAX_AGE_MS]
)
def test_admission_decision_older_than_300000_ms_or_from_the_future_is_policy_stale(
    real_engine: PolicyEngine, bundle_a: Bundle, age_ms: int
) -> None:
    with pytest.raises(PolicyStale) as raised:
        _decide_at(real_engine, bundle_a, ISSUED_AT + age_ms)
    assert raised.value.code is ErrorCode.POLICY_STALE
    assert raised.value.code.retriable is True


def _value(envelope: dict[str, Any]) -> dict[str, Any]:
    assert envelope["ok"] is True, envelope
    result: dict[str, Any] = envelope["output"]["value"]
    return result


@pytest.mark.parametrize("skew_ms", [ADMISSION_MAX_AGE_MS + 1, -1_000])
def test_request_admission_with_a_stale_decision_is_retriable_and_writes_nothing(
    tmp_path: Path, opa_server_url: str, bundle_a: Bundle, skew_ms: int
) -> None:
    """The service stamps the decision with its call instant; the decider's clock runs ahead
    (decision too old) or behind (decision from the future) by `skew_ms`."""
    skew = [skew_ms]
    engine = OpaServerEngine(opa_server_url)
    with memory_service(
        tmp_path / "data",
        RootKey(os.urandom(32)),
        engine,
        bundle_a.identity,
        decider_clock=lambda: real_clock_ms() + skew[0],
    ) as (svc, services):
        alice = Caller(svc)
        capture_args = demo_capture_arguments("Refund approved.", f"c-{uuid.uuid4().hex}")
        candidate_id = _value(alice.call("engram_memory_capture", capture_args))["candidate_id"]
        admit_args = {"candidate_id": candidate_id, "idempotency_key": f"a-{uuid.uuid4().hex}"}

        stale = alice.call("engram_memory_request_admission", admit_args)
        assert stale["ok"] is False
        assert (stale["error"]["code"], stale["error"]["retriable"]) == ("POLICY_STALE", True)
        with services.database.transaction() as tx:
            operations = [row[0] for row in tx.fetchall("SELECT operation FROM journal_events")]
        assert operations == ["capture"]

        skew[0] = 0  # clocks agree again: the retry with the same key is decided afresh
        outcome = _value(alice.call("engram_memory_request_admission", admit_args))["outcome"]
        assert outcome["status"] == "accepted"
    engine.close()
