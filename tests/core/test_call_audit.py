"""A call's audit facts as a value: what a refused or failed outcome carries, and that an
entry written in the tool's own transaction stays the call's only entry."""

from __future__ import annotations

from engram_memory.contract.errors import ErrorCode, ProtocolCode
from engram_memory.contract.exceptions import ProtocolRefusal, ToolError
from engram_memory.core.call_audit import CallAudit, ToolOutcome


def _gathered() -> CallAudit:
    audit = CallAudit()
    audit.targets("cand_a")
    audit.keyed("key-digest")
    return audit


def test_a_refusal_carries_the_facts_gathered_until_then_under_its_code() -> None:
    outcome = ToolOutcome.failed(ToolError(ErrorCode.NOT_FOUND, "gone"), _gathered())

    assert outcome.value is None
    assert not outcome.written_in_tx
    assert (outcome.facts.outcome, outcome.facts.detail) == ("NOT_FOUND", "gone")
    assert outcome.facts.target_ids == ("cand_a",)
    assert outcome.facts.idempotency_key_digest == "key-digest"


def test_a_protocol_refusal_is_audited_under_its_json_rpc_code() -> None:
    refusal = ProtocolRefusal(ProtocolCode.CONTEXT_UNAVAILABLE, "confirmation missing")

    outcome = ToolOutcome.failed(refusal, _gathered())

    assert outcome.facts.outcome == f"rpc:{ProtocolCode.CONTEXT_UNAVAILABLE.rpc_code}"


def test_facts_taken_earlier_do_not_change_when_the_call_goes_on() -> None:
    audit = _gathered()
    before = audit.facts("ok")

    audit.targets("mem_b")

    assert before.target_ids == ("cand_a",)
    assert audit.facts("ok").target_ids == ("cand_a", "mem_b")


def test_an_entry_written_in_the_tools_transaction_stays_the_only_one_whatever_follows() -> None:
    audit = _gathered()
    written = audit.facts("ok")
    audit.wrote(written)

    succeeded = ToolOutcome.succeeded({"status": "committed_pending"}, audit)
    failed = ToolOutcome.failed(ToolError(ErrorCode.MUTATION_OUTCOME_UNKNOWN), audit)

    assert succeeded.written_in_tx
    assert succeeded.facts is written
    assert failed.written_in_tx
    assert failed.facts is written
    assert failed.error is not None
    assert failed.error.code is ErrorCode.MUTATION_OUTCOME_UNKNOWN


def test_an_outcome_not_yet_audited_is_left_to_the_entry_point() -> None:
    outcome = ToolOutcome.succeeded({"status": "duplicate_exact"}, _gathered())

    assert not outcome.written_in_tx
    assert outcome.facts.outcome == "ok"
    assert outcome.result() == {"status": "duplicate_exact"}
