"""Fail closed: no policy engine, no audit write, no key -> a coded failure, never a success."""

from __future__ import annotations

import errno
import json
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.errors import ProtocolCode
from engram_memory.contract.exceptions import PolicyUnavailable, ProtocolRefusal
from engram_memory.core.runtime import Services
from engram_memory.policy.decider import ADMISSION_PATH, PolicyDecider
from engram_memory.policy.engine import EngineAnswer
from engram_memory.store import call_log
from engram_memory.tools.dispatch import CallRequest
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record, admit, capture, code, high_water, value


class _UnreachableEngine:
    engine_id = "unreachable"
    engine_version = "0"

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        raise PolicyUnavailable("connection refused")

    def close(self) -> None:
        return None


class _OtherRevisionEngine:
    """Answers like the real engine but reports another bundle revision."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.engine_id = real.engine_id
        self.engine_version = real.engine_version

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        answer = self.real.evaluate(path, policy_input)
        return EngineAnswer(answer.result, "engram-default+sha256:" + "f" * 64)

    def close(self) -> None:
        return None


def test_unreachable_policy_engine_is_policy_unavailable_and_writes_nothing(
    alice: Caller, services: Services
) -> None:
    services.decider = PolicyDecider(
        _UnreachableEngine(), services.decider.expected, services.clock_ms
    )
    envelope = alice.call(
        "engram_memory_capture", demo_capture_arguments("x", uuid.uuid4().hex * 2)
    )
    assert code(envelope) == "POLICY_UNAVAILABLE"
    assert envelope["error"]["retriable"] is True
    assert high_water(services) == 0


def test_engine_serving_another_bundle_is_policy_stale(
    alice: Caller, services: Services, engine: Any
) -> None:
    real = services.decider
    services.decider = PolicyDecider(_OtherRevisionEngine(engine), real.expected, services.clock_ms)
    envelope = alice.call("engram_memory_search", {"query": "x", "purpose_ref": alice.purpose_ref})
    assert code(envelope) == "POLICY_STALE"


class _UnboundAdmissionEngine:
    """Answers like the real engine, but its admission decisions name another record."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.engine_id = real.engine_id
        self.engine_version = real.engine_version

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        answer = self.real.evaluate(path, policy_input)
        if path == ADMISSION_PATH and isinstance(answer.result, Mapping):
            unbound = {**answer.result, "record_digest": "sha256:" + "d" * 64}
            return EngineAnswer(unbound, answer.revision)
        return answer

    def close(self) -> None:
        return None


def test_unbound_admission_decision_is_policy_unavailable_and_the_candidate_stays_pending(
    alice: Caller, services: Services, engine: Any
) -> None:
    candidate_id = capture(alice)["candidate_id"]
    real = services.decider
    services.decider = PolicyDecider(
        _UnboundAdmissionEngine(engine), real.expected, services.clock_ms
    )
    envelope = admit(alice, candidate_id)
    assert code(envelope) == "POLICY_UNAVAILABLE"
    assert envelope["error"]["retriable"] is True
    services.decider = real
    assert value(admit(alice, candidate_id))["outcome"]["status"] == "accepted"


def test_failed_audit_write_fails_the_call_and_rolls_back_the_mutation(
    alice: Caller, services: Services
) -> None:
    with services.database.transaction() as tx:
        tx.execute("ALTER TABLE audit_entries RENAME TO audit_entries_gone")
    envelope = alice.call(
        "engram_memory_capture", demo_capture_arguments("x", uuid.uuid4().hex * 2)
    )
    assert code(envelope) == "STORE_UNAVAILABLE"
    # The table back, without projecting the refusal's entry (the call log holds it) first.
    with services.database._direct_transaction() as tx:
        tx.execute("ALTER TABLE audit_entries_gone RENAME TO audit_entries")
    assert high_water(services) == 0


def test_failed_audit_write_withholds_a_read(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_id = accepted_record(alice)

    def disk_refuses(fd: int) -> None:
        raise OSError(errno.EIO, "flush failed")

    # A read's entry commits through the call log (issue 20): its flush fails.
    monkeypatch.setattr(call_log.os, "fdatasync", disk_refuses)
    envelope = alice.call(
        "engram_memory_get", {"record_id": record_id, "purpose_ref": alice.purpose_ref}
    )
    monkeypatch.undo()
    assert code(envelope) == "STORE_UNAVAILABLE"
    assert "output" not in envelope


def test_destroyed_item_key_is_blob_missing_not_plaintext(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice)
    assert services.keys.destroy("tenant:acme/workspace:support", record_id)
    envelope = alice.call(
        "engram_memory_get", {"record_id": record_id, "purpose_ref": alice.purpose_ref}
    )
    assert code(envelope) == "BLOB_MISSING"
    assert value(
        alice.call("engram_memory_search", {"query": "zzz", "purpose_ref": alice.purpose_ref})
    )


def _explode(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("leak? /srv/engram/secret.duckdb SELECT * FROM records password=x")


def test_unexpected_failure_before_commit_is_capability_unavailable_without_leaking(
    alice: Caller,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr("engram_memory.tools.capture.build_record", _explode)
    envelope = alice.call(
        "engram_memory_capture", demo_capture_arguments("x", uuid.uuid4().hex * 2)
    )
    assert code(envelope) == "CAPABILITY_UNAVAILABLE"
    assert high_water(services) == 0
    assert "leak?" not in json.dumps(envelope)
    assert "leak?" not in caplog.text
    assert "/srv/engram" not in caplog.text


def test_unexpected_failure_after_commit_is_mutation_outcome_unknown_and_retry_settles_it(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_id = accepted_record(alice)
    args = {
        "record_id": record_id,
        "idempotency_key": uuid.uuid4().hex * 2,
        "reason_ref": "reason:r",
    }
    with monkeypatch.context() as patch:
        patch.setattr("engram_memory.core.steps.destroy_key", _explode)
        lost = alice.call(
            "engram_memory_forget", args, alice.confirm("engram_memory_forget", args, record_id)
        )
    assert code(lost) == "MUTATION_OUTCOME_UNKNOWN"
    retried = value(
        alice.call(
            "engram_memory_forget", args, alice.confirm("engram_memory_forget", args, record_id)
        )
    )
    assert retried["replayed"] is True
    assert retried["projection_invalidation"] == "complete"


def test_unexpected_failure_in_a_read_is_capability_unavailable(
    alice: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_id = accepted_record(alice)
    monkeypatch.setattr("engram_memory.tools.get.packet_budget", _explode)
    envelope = alice.call(
        "engram_memory_get", {"record_id": record_id, "purpose_ref": alice.purpose_ref}
    )
    assert code(envelope) == "CAPABILITY_UNAVAILABLE"


def test_tools_list_with_an_unreachable_policy_engine_is_the_retriable_protocol_refusal(
    alice: Caller, services: Services
) -> None:
    services.decider = PolicyDecider(
        _UnreachableEngine(), services.decider.expected, services.clock_ms
    )
    with pytest.raises(ProtocolRefusal) as refused:
        alice.service.list_tools(alice.token())
    assert refused.value.code is ProtocolCode.POLICY_UNAVAILABLE
    assert refused.value.code.rpc_code == -32000


def test_arguments_the_gate_saw_duplicate_keys_in_are_invalid_schema_after_binding(
    alice: Caller,
) -> None:
    arguments = {"query": "x", "purpose_ref": alice.purpose_ref}
    flagged = CallRequest("engram_memory_search", arguments, alice.token(), None)
    envelope = alice.service.call_tool(replace(flagged, argument_defect="duplicate_argument_keys"))
    assert code(envelope) == "INVALID_SCHEMA"
    with pytest.raises(ProtocolRefusal) as refused:
        alice.service.call_tool(
            replace(flagged, invocation_token="forged", argument_defect="duplicate_argument_keys")
        )
    assert refused.value.code is ProtocolCode.CONTEXT_UNAVAILABLE
    fresh = replace(flagged, invocation_token=alice.token())  # a token binds one call
    assert value(alice.service.call_tool(fresh)) is not None
