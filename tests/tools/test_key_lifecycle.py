"""The key lifecycle through the tools: promises made in the commit, kept after it, on replay
and at start-up; promotion leaves one way to open the content; failed writes leave no key.

Undeletable keys are made the way a file system refuses: a directory stands where the key file
is, so shredding it fails (nothing in the service is patched).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.maintenance import MaintenanceService, Operator
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.digests import candidate_id_for, one_way_ref
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import CommitOutcomeUnknown, ToolError
from engram_memory.core import item_keys
from engram_memory.core.key_recovery import recover_key_directory
from engram_memory.core.runtime import CallContext, Services
from engram_memory.crypto.key_hygiene import file_names
from engram_memory.crypto.keystore import KeyStore
from engram_memory.host.context import verify_invocation
from engram_memory.store import key_intents, memory
from tests.harness import Caller
from tests.tools.test_tool_rules import (
    _key,
    accepted_record,
    admit,
    capture,
    code,
    forget,
    high_water,
    value,
    withdraw,
)

SCOPE = "tenant:acme/workspace:support"
DANA = Operator("acme", "support", "human:dana")


def _key_path(services: Services, item_id: str) -> Path:
    return services.keys.path_for(SCOPE, item_id)


def _promised(services: Services) -> list[tuple[str, str]]:
    """Promises still pending once the tidying queued for the next write has run."""
    services.database.settle_deferred()
    with services.database.transaction() as tx:
        return key_intents.pending(tx)


def _candidate(services: Services, candidate_id: str) -> memory.CandidateRow:
    with services.database.transaction() as tx:
        row = memory.get_candidate(tx, SCOPE, candidate_id)
    assert row is not None
    return row


def _make_undeletable(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()
    (path / "pinned").write_bytes(b"")


def _make_deletable(path: Path) -> None:
    (path / "pinned").unlink()
    path.rmdir()


def _accepted(alice: Caller) -> tuple[str, str]:
    candidate_id = capture(alice)["candidate_id"]
    outcome = value(admit(alice, candidate_id))["outcome"]
    assert outcome["status"] == "accepted"
    return candidate_id, str(outcome["record_id"])


def test_accept_clears_the_candidate_body_and_destroys_its_key(
    alice: Caller, services: Services
) -> None:
    candidate_id, record_id = _accepted(alice)

    assert _candidate(services, candidate_id).sealed_body is None
    assert not _key_path(services, candidate_id).exists()
    assert _key_path(services, record_id).exists()
    assert _promised(services) == []


def _accepted_keeping_candidate_key(alice: Caller, services: Services) -> tuple[str, str, bytes]:
    """(candidate id, record id, the candidate's key as it was before the accept shredded it)."""
    candidate_id = capture(alice)["candidate_id"]
    surviving = services.keys.get(SCOPE, candidate_id)
    assert surviving is not None
    record_id = value(admit(alice, candidate_id))["outcome"]["record_id"]
    return candidate_id, record_id, surviving


def test_forget_also_destroys_the_key_of_the_candidate_the_record_came_from(
    alice: Caller, services: Services
) -> None:
    candidate_id, record_id, surviving = _accepted_keeping_candidate_key(alice, services)
    # The candidate key outlived the admission (as a crash before this fix could leave it).
    services.keys.put(SCOPE, candidate_id, surviving)

    forgotten = value(forget(alice, record_id))

    assert forgotten["projection_invalidation"] == "complete"
    assert not _key_path(services, candidate_id).exists()
    assert not _key_path(services, record_id).exists()


def test_forget_is_pending_while_a_key_that_opens_the_content_remains_and_a_replay_completes(
    alice: Caller, services: Services
) -> None:
    candidate_id, record_id = _accepted(alice)
    _make_undeletable(_key_path(services, candidate_id))
    key = _key()

    first = value(forget(alice, record_id, key))

    assert first["projection_invalidation"] == "pending"
    assert "coverage_receipt_digest" not in first
    assert _promised(services) == [(SCOPE, candidate_id)]
    _make_deletable(_key_path(services, candidate_id))
    replay = value(forget(alice, record_id, key))
    assert (replay["replayed"], replay["projection_invalidation"]) == (True, "complete")
    assert _promised(services) == []


def test_forget_after_an_accept_whose_candidate_key_resisted_keeps_one_promise_until_done(
    alice: Caller, services: Services
) -> None:
    candidate_id, record_id, surviving = _accepted_keeping_candidate_key(alice, services)
    services.database.settle_deferred()
    # As if the accept's destruction had failed: the key is back and still owed.
    services.keys.put(SCOPE, candidate_id, surviving)
    with services.database.transaction() as tx:
        key_intents.promise(tx, SCOPE, [candidate_id], "accept", 0)
    _make_undeletable(_key_path(services, record_id))
    key = _key()

    first = value(forget(alice, record_id, key))

    assert first["projection_invalidation"] == "pending"
    assert _promised(services) == [(SCOPE, record_id)]  # the candidate's promise was kept
    assert not _key_path(services, candidate_id).exists()
    _make_deletable(_key_path(services, record_id))
    replay = value(forget(alice, record_id, key))
    assert (replay["replayed"], replay["projection_invalidation"]) == (True, "complete")
    assert _promised(services) == []


def test_withdraw_replay_retries_a_destruction_the_file_system_refused(
    alice: Caller, services: Services
) -> None:
    candidate_id = capture(alice)["candidate_id"]
    _make_undeletable(_key_path(services, candidate_id))
    key = _key()

    first = value(withdraw(alice, candidate_id, key))

    assert first["key_destruction"] == "pending"
    assert _candidate(services, candidate_id).sealed_body is None
    _make_deletable(_key_path(services, candidate_id))
    replay = value(withdraw(alice, candidate_id, key))
    assert (replay["replayed"], replay["key_destruction"]) == (True, "complete")
    assert _promised(services) == []


def test_host_adjudication_ends_the_candidate_like_admission(
    alice: Caller, services: Services
) -> None:
    admin = MaintenanceService(services)
    held = [
        capture(alice, f"Held {n}.", evidence_ref="evidence:review/1")["candidate_id"]
        for n in range(2)
    ]
    for candidate_id in held:
        assert value(admit(alice, candidate_id))["outcome"]["status"] == "pending_adjudication"

    accepted = admin.adjudicate(DANA, held[0], "accept", "reason:reviewed")
    admin.adjudicate(DANA, held[1], "reject", "reason:wrong")

    for candidate_id in held:
        assert _candidate(services, candidate_id).sealed_body is None
        assert not _key_path(services, candidate_id).exists()
    assert _key_path(services, str(accepted["record_id"])).exists()
    assert _promised(services) == []


def _context(alice: Caller, services: Services) -> CallContext:
    invocation = verify_invocation(alice.token(), services.host_keys, services.clock_ms() / 1000)
    return CallContext(services, invocation, "engram_memory_capture", services.clock_ms())


@pytest.mark.parametrize(
    ("failure", "key_kept"),
    [
        (ToolError(ErrorCode.STORE_UNAVAILABLE, "rolled back"), False),
        (CommitOutcomeUnknown("commit failed"), True),
    ],
    ids=["rolled-back", "commit-outcome-unknown"],
)
def test_a_key_written_for_a_transaction_that_fails_is_shredded_unless_it_may_have_committed(
    alice: Caller, services: Services, failure: Exception, key_kept: bool
) -> None:
    ctx = _context(alice, services)
    item_id = f"cand_{uuid.uuid4().hex}"
    with pytest.raises(type(failure)), item_keys.fresh_key(ctx, item_id):
        raise failure

    assert _key_path(services, item_id).exists() is key_kept
    assert not services.keys.claims.held(_key_path(services, item_id))


def _capture_id(alice: Caller, arguments: dict[str, Any]) -> str:
    source = one_way_ref("capture-source", f"{SCOPE}\0{alice.principal}")
    return candidate_id_for(source, str(arguments["idempotency_key"]))


def test_a_call_on_an_item_another_call_is_writing_is_mutation_outcome_unknown(
    alice: Caller, services: Services
) -> None:
    arguments = demo_capture_arguments("In flight.", _key())
    path = _key_path(services, _capture_id(alice, arguments))
    assert services.keys.claims.claim(path)  # as the first call holds it until it commits
    try:
        assert code(alice.call("engram_memory_capture", arguments)) == "MUTATION_OUTCOME_UNKNOWN"
    finally:
        services.keys.claims.release(path)
    assert high_water(services) == 0
    assert value(alice.call("engram_memory_capture", arguments))["status"] == "committed_pending"


def test_an_orphan_key_at_the_items_path_is_replaced_and_the_retry_commits_once(
    alice: Caller, services: Services
) -> None:
    arguments = demo_capture_arguments("Retried after a crash.", _key())
    orphan = _key_path(services, _capture_id(alice, arguments))
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"\x07" * 92)  # what a crash after the key write left

    captured = value(alice.call("engram_memory_capture", arguments))

    assert captured["status"] == "committed_pending"
    assert value(admit(alice, captured["candidate_id"]))["outcome"]["status"] == "accepted"


def test_start_up_keeps_every_promise_and_sweeps_orphans_but_not_live_keys(
    alice: Caller, services: Services
) -> None:
    live = capture(alice)["candidate_id"]
    ended, _record = _accepted(alice)
    services.database.settle_deferred()  # a crash would lose the queued tidying instead
    services.keys.put(SCOPE, ended, b"\x01" * 92)  # survived a crash after the commit
    with services.database.transaction() as tx:
        key_intents.promise(tx, SCOPE, [ended], "accept", 0)
    orphan = _key_path(services, "cand_never_committed")
    services.keys.put(SCOPE, "cand_never_committed", b"\x02" * 92)
    leftover = orphan.with_name(orphan.name + ".tmp")
    leftover.write_bytes(b"")

    report = recover_key_directory(services.database, services.keys, grace_s=0)

    assert report.destructions_completed == 1
    assert _promised(services) == []
    assert [p.exists() for p in (_key_path(services, ended), orphan, leftover)] == [False] * 3
    assert _key_path(services, live).exists()


def test_the_store_names_key_files_exactly_as_the_key_store_does(
    alice: Caller, services: Services
) -> None:
    """Start-up's sweep takes the key file names from the store's query (sha256 in DuckDB);
    they must be the key store's own names for every state: pending, accepted, withdrawn,
    forgotten."""
    pending = capture(alice, "Pending refund.")["candidate_id"]
    _, record_id = _accepted(alice)
    forgotten = accepted_record(alice, "Forgotten refund.")
    value(forget(alice, forgotten))
    value(withdraw(alice, capture(alice, "Withdrawn refund.")["candidate_id"]))

    with services.database.transaction() as tx:
        from_store = key_intents.item_key_names(tx)
        from_python = file_names(key_intents.item_keys(tx))

    assert from_store == from_python
    live, ended = from_store
    assert services.keys.file_name(SCOPE, pending) in live
    assert services.keys.file_name(SCOPE, record_id) in live
    assert services.keys.file_name(SCOPE, forgotten) in ended


def test_the_store_digest_of_a_key_name_matches_for_any_text(services: Services) -> None:
    """The same SHA-256 of UTF-8 text, NUL included, as `name_digest` for unusual ids."""
    pairs = [("tenant:é/workspace:ü", "cand_ß"), ("tenant:a/workspace:b", "mem_" + "z" * 60)]
    with services.database.transaction() as tx:
        for scope_ref, item_id in pairs:
            row = tx.fetchone("SELECT sha256(? || chr(0) || ?) || '.key'", [scope_ref, item_id])
            assert row is not None
            assert row[0] == KeyStore.file_name(scope_ref, item_id)
