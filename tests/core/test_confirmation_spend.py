"""SPEC §7: a confirmation is single use. The gate checks it on a snapshot; it is consumed with
the call's audit entry, and a call whose confirmation another call consumed first is refused
gate_failed, whichever transaction writes its entry."""

from __future__ import annotations

import pytest

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.core import steps
from engram_memory.core.call_audit import CallAudit, ConfirmationSpend
from engram_memory.core.runtime import CallContext, Services
from engram_memory.host.context import verify_invocation
from engram_memory.store import memory
from engram_memory.store.audit import ApprovalEvidence
from tests.harness import Caller


def _context(alice: Caller, services: Services) -> CallContext:
    invocation = verify_invocation(alice.token(), services.host_keys, services.clock_ms() / 1000)
    return CallContext(services, invocation, "engram_memory_withdraw", services.clock_ms())


def _gate_passed(services: Services, jti: str) -> CallAudit:
    """A call whose gate found `jti` unused on a snapshot taken now."""
    audit = CallAudit()
    with services.database.reading() as snapshot:
        assert not memory.confirmation_used(snapshot, jti)
        evidence = ApprovalEvidence("human:alice", jti, 1, 1, "sha256:" + "0" * 64)
        audit.confirmed(ConfirmationSpend(evidence, snapshot.generation))
    return audit


def _consume(ctx: CallContext, jti: str) -> None:
    with ctx.services.database.transaction() as tx:
        memory.consume_confirmation(tx, jti, ctx.scope_ref, ctx.tool, ctx.now_ms)


def _used(services: Services, jti: str) -> bool:
    with services.database.reading() as tx:
        return memory.confirmation_used(tx, jti)


def test_an_entry_written_by_the_group_writer_consumes_the_confirmation(
    alice: Caller, services: Services
) -> None:
    ctx = _context(alice, services)
    audit = _gate_passed(services, "jti-1")
    with services.database.transaction() as tx:
        (written,) = steps.write_audits(tx, [(ctx, audit.facts("NOT_FOUND"))])
    assert written.outcome == "NOT_FOUND"
    assert _used(services, "jti-1")


def test_a_confirmation_consumed_after_the_gate_turns_a_grouped_entry_into_gate_failed(
    alice: Caller, services: Services
) -> None:
    ctx = _context(alice, services)
    audit = _gate_passed(services, "jti-2")
    _consume(ctx, "jti-2")  # a racing call with the same confirmation committed first
    with services.database.transaction() as tx:
        (written,) = steps.write_audits(tx, [(ctx, audit.facts("ok"))])
    assert written.outcome == ErrorCode.gate_failed.name


def test_two_entries_of_one_group_with_one_confirmation_pass_the_gate_once(
    alice: Caller, services: Services
) -> None:
    ctx = _context(alice, services)
    first, second = _gate_passed(services, "jti-3"), _gate_passed(services, "jti-3")
    with services.database.transaction() as tx:
        written = steps.write_audits(tx, [(ctx, first.facts("ok")), (ctx, second.facts("ok"))])
    assert [facts.outcome for facts in written] == ["ok", ErrorCode.gate_failed.name]


def test_a_mutation_whose_confirmation_was_consumed_after_the_gate_rolls_back(
    alice: Caller, services: Services
) -> None:
    ctx = _context(alice, services)
    audit = _gate_passed(services, "jti-4")
    _consume(ctx, "jti-4")
    with pytest.raises(ToolError) as refused, services.database.transaction() as tx:
        steps.audit_in_transaction(tx, ctx, audit)
    assert refused.value.code is ErrorCode.gate_failed
    assert audit.written is None
