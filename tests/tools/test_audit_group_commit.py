"""Reads audited by group commit: each concurrent call gets exactly one durable entry, and a
failed group commit (a call log flush, issue 20) withholds the answer of every call in it."""

from __future__ import annotations

import errno
import threading
from typing import Any

import pytest

from engram_memory.core.runtime import Services
from engram_memory.store import audit, call_log
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record

THREADS = 16


def _concurrent_gets(alice: Caller, record_id: str) -> list[dict[str, Any]]:
    start = threading.Barrier(THREADS)
    envelopes: list[dict[str, Any]] = [{} for _ in range(THREADS)]
    arguments = {"record_id": record_id, "purpose_ref": alice.purpose_ref}

    def read(index: int) -> None:
        start.wait()
        envelopes[index] = alice.call("engram_memory_get", arguments)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return envelopes


def test_concurrent_reads_each_leave_exactly_one_entry_in_an_intact_chain(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice)
    with services.database.reading() as tx:
        before = audit.verify(tx)[0]

    envelopes = _concurrent_gets(alice, record_id)

    assert all(envelope["ok"] for envelope in envelopes)
    with services.database.reading() as tx:
        entries, _ = audit.verify(tx)
        audit_ids = [row[0] for row in tx.fetchall("SELECT audit_id FROM audit_entries")]
    assert entries == before + THREADS
    for envelope in envelopes:
        assert audit_ids.count(envelope["auditId"]) == 1


def test_a_failed_group_commit_withholds_every_read_in_it(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_id = accepted_record(alice)
    log = services.database.call_log
    assert log is not None
    head = log.durable_head()

    def disk_refuses(fd: int) -> None:
        raise OSError(errno.EIO, "flush failed")

    # The call log's flush fails (the disk refuses): the log stops, nothing is acknowledged.
    monkeypatch.setattr(call_log.os, "fdatasync", disk_refuses)
    envelopes = _concurrent_gets(alice, record_id)
    monkeypatch.undo()

    assert [e["error"]["code"] for e in envelopes] == ["STORE_UNAVAILABLE"] * THREADS
    assert all("output" not in e for e in envelopes)
    assert log.durable_head() == head  # the log stopped: nothing of the batch is durable
    with services.database.reading() as tx:
        audit_ids = {row[0] for row in tx.fetchall("SELECT audit_id FROM audit_entries")}
    assert not audit_ids & {e["auditId"] for e in envelopes}
