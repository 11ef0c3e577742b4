"""Item 7: every call writes in exactly one transaction: a mutation's change, journal event,
receipts, idempotency result, audit entry, spent confirmation and promised key destructions
commit together; a read's audit entry commits in one append to the call log (issue 20) and
takes no write transaction; a refusal that spends a confirmation keeps its transaction."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from engram_memory.core.runtime import Services
from engram_memory.store.transaction import Transaction
from tests.harness import Caller
from tests.tools.test_tool_rules import (
    accepted_record,
    admit,
    capture,
    forget,
    value,
    withdraw,
)


class WriteCounter:
    """Counts the transactions of one store that wrote (an observer only)."""

    def __init__(self, services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes = 0
        inner = services.database.transaction

        @contextmanager
        def counted() -> Iterator[Transaction]:
            with inner() as tx:
                yield tx
            self.writes += int(tx.wrote)

        monkeypatch.setattr(services.database, "transaction", counted)

    def of(self, call: Any, *args: Any) -> int:
        before = self.writes
        call(*args)
        return self.writes - before


@pytest.fixture
def counter(services: Services, monkeypatch: pytest.MonkeyPatch) -> WriteCounter:
    return WriteCounter(services, monkeypatch)


def test_each_mutation_commits_in_one_write_transaction(
    alice: Caller, counter: WriteCounter
) -> None:
    candidate_id = capture(alice)["candidate_id"]
    assert counter.of(capture, alice) == 1
    assert counter.of(lambda: value(admit(alice, candidate_id))) == 1
    record_id = accepted_record(alice)
    assert counter.of(lambda: value(forget(alice, record_id))) == 1
    pending = capture(alice)["candidate_id"]
    assert counter.of(lambda: value(withdraw(alice, pending))) == 1


def test_each_read_and_each_refusal_commits_only_its_audit_entry(
    alice: Caller, counter: WriteCounter, services: Services
) -> None:
    record_id = accepted_record(alice)
    purpose = alice.purpose_ref
    log = services.database.call_log
    assert log is not None

    def appended(call: Any) -> tuple[int, int]:
        """(write transactions, call log records) the call took."""
        before = log.durable_head().sequence
        return counter.of(call), log.durable_head().sequence - before

    get = {"record_id": record_id, "purpose_ref": purpose}
    assert appended(lambda: value(alice.call("engram_memory_get", get))) == (0, 1)
    search = {"query": "refund", "purpose_ref": purpose}
    assert appended(lambda: value(alice.call("engram_memory_search", search))) == (0, 1)
    absent = "mem_" + "a" * 52  # well formed, unknown: refused NOT_FOUND after the gate
    forgotten = {
        "record_id": absent,
        "idempotency_key": "key-absent-record-1",
        "reason_ref": "reason:r",
    }
    confirmation = alice.confirm("engram_memory_forget", forgotten, absent)
    before = counter.writes
    refused = alice.call("engram_memory_forget", forgotten, confirmation)
    assert (refused["error"]["code"], counter.writes - before) == ("NOT_FOUND", 1)
