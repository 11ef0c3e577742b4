"""SPEC §1.7 / issue 9: an invocation token binds one request; a replay is -32603 and is
audited in the host stream as a replay, and the original call is unaffected."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import pytest

from engram_memory.contract.exceptions import ProtocolRefusal
from engram_memory.core.runtime import Services
from engram_memory.store import audit
from engram_memory.tools import dispatch
from engram_memory.tools.dispatch import CallRequest, MemoryService
from tests.harness import Caller

GET = "engram_memory_get"
UNKNOWN = "mem_" + "a" * 52


def _get(caller: Caller) -> dict[str, Any]:
    return {"record_id": UNKNOWN, "purpose_ref": caller.purpose_ref}


def _replays(services: Services) -> list[tuple[str, str]]:
    with services.database.reading() as tx:
        rows = tx.fetchall(
            "SELECT token_digest, tool FROM audit_entries"
            " WHERE scope_ref = 'host' AND reason = 'token_replayed' ORDER BY sequence"
        )
    return [(str(digest), str(tool)) for digest, tool in rows]


def _entries_with_audit_id(services: Services, audit_id: str) -> int:
    with services.database.reading() as tx:
        row = tx.fetchone("SELECT count(*) FROM audit_entries WHERE audit_id = ?", [audit_id])
    assert row is not None
    return int(row[0])


def test_a_replayed_call_token_is_refused_and_audited_as_a_replay(
    alice: Caller, services: Services
) -> None:
    token = alice.token(audit_id="audit:once")
    first = alice.service.call_tool(CallRequest(GET, _get(alice), token))
    assert first["error"]["code"] == "NOT_FOUND"
    assert first["auditId"] == "audit:once"
    with pytest.raises(ProtocolRefusal) as replayed:
        alice.service.call_tool(CallRequest(GET, _get(alice), token))
    assert replayed.value.code.rpc_code == -32603
    digest = "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    assert _replays(services) == [(digest, GET)]
    assert _entries_with_audit_id(services, "audit:once") == 1


def test_a_listing_token_cannot_be_spent_again_on_a_call(alice: Caller, services: Services) -> None:
    token = alice.token()
    assert alice.service.list_tools(token)
    with pytest.raises(ProtocolRefusal) as replayed:
        alice.service.call_tool(CallRequest(GET, _get(alice), token))
    assert replayed.value.code.rpc_code == -32603
    with pytest.raises(ProtocolRefusal):
        alice.service.list_tools(token)
    assert [tool for _, tool in _replays(services)] == [GET, "tools/list"]


def test_a_fresh_token_with_a_used_audit_id_is_a_replay_too(alice: Caller) -> None:
    alice.call(GET, _get(alice), audit_id="audit:reused")
    with pytest.raises(ProtocolRefusal):
        alice.call(GET, _get(alice), audit_id="audit:reused")


def test_a_replay_after_a_restart_within_the_token_lifetime_is_refused(
    alice: Caller, services: Services
) -> None:
    token = alice.token()
    alice.service.call_tool(CallRequest(GET, _get(alice), token))
    alice.service.close()
    restarted = MemoryService(services)
    with pytest.raises(ProtocolRefusal) as replayed:
        restarted.call_tool(CallRequest(GET, _get(alice), token))
    assert replayed.value.code.rpc_code == -32603


def test_of_concurrent_replays_of_one_token_exactly_one_is_served(
    alice: Caller, services: Services
) -> None:
    token = alice.token()
    start = threading.Barrier(8)
    served: list[str] = []
    refused: list[int] = []
    lock = threading.Lock()

    def race() -> None:
        start.wait(timeout=10)
        try:
            envelope = alice.service.call_tool(CallRequest(GET, _get(alice), token))
        except ProtocolRefusal as refusal:
            with lock:
                refused.append(refusal.code.rpc_code)
        else:
            with lock:
                served.append(envelope["error"]["code"])

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert served == ["NOT_FOUND"]
    assert refused == [-32603] * 7
    assert len(_replays(services)) == 7


def test_the_audit_ids_of_expired_tokens_leave_the_store_while_serving(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "_PRUNE_EVERY_BINDINGS", 2)
    with services.database.transaction() as tx:
        audit.claim_audit_ids(tx, [("audit:long-expired", 1_000)])
    alice.call(GET, _get(alice))
    alice.call(GET, _get(alice))
    with services.database.reading() as tx:
        kept = {str(row[0]) for row in tx.fetchall("SELECT audit_id FROM used_audit_ids")}
    assert "audit:long-expired" not in kept
    assert len(kept) == 2  # the two live calls' ids stay until their tokens expire
