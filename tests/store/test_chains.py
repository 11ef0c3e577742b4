"""The journal and audit chains re-derive, and any edit to a stored row is detected."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.contract.exceptions import (
    AuditChainBroken,
    JournalCorrupt,
    JournalIntentConflict,
    StoreVersionSkew,
)
from engram_memory.contract.receipts import DecisionReceipt
from engram_memory.policy.receipts import make_receipt
from engram_memory.store import audit, journal
from engram_memory.store.database import Database


@pytest.fixture
def database(tmp_path: Path) -> Database:
    return Database.open(tmp_path)


def _append(db: Database, scope: str, n: int) -> list[journal.JournalEvent]:
    events = []
    with db.transaction() as tx:
        for i in range(n):
            events.append(
                journal.append(
                    tx,
                    scope,
                    event_id=f"capture:{scope}:{i}",
                    operation="capture",
                    target_id=f"c{i}",
                    fields={"digests": {"n": i}},
                )
            )
    return events


def test_cursors_are_dense_per_scope_and_start_at_one(database: Database) -> None:
    a = _append(database, "scope:a", 3)
    b = _append(database, "scope:b", 2)
    assert [e.cursor_text for e in a] == ["1", "2", "3"]
    assert [e.cursor_text for e in b] == ["1", "2"]
    with database.transaction() as tx:
        assert journal.verify_scope(tx, "scope:a") == 3


def test_same_event_id_with_same_intent_returns_the_existing_event(database: Database) -> None:
    first = _append(database, "s", 1)[0]
    with database.transaction() as tx:
        again = journal.append(
            tx,
            "s",
            event_id=first.event_id,
            operation="capture",
            target_id="c0",
            fields={"digests": {"n": 0}},
        )
    assert again.cursor == first.cursor


def test_same_event_id_with_other_intent_conflicts(database: Database) -> None:
    first = _append(database, "s", 1)[0]
    with pytest.raises(JournalIntentConflict), database.transaction() as tx:
        journal.append(
            tx,
            "s",
            event_id=first.event_id,
            operation="capture",
            target_id="c0",
            fields={"digests": {"n": 9}},
        )


def test_edited_journal_event_breaks_the_chain(database: Database) -> None:
    _append(database, "s", 3)
    with database.transaction() as tx:
        tx.execute(
            "UPDATE journal_events SET event_json = replace(event_json, 'c1', 'c9') "
            "WHERE cursor = 2"
        )
    with pytest.raises(JournalCorrupt), database.transaction() as tx:
        journal.verify_scope(tx, "s")


def test_deleted_journal_event_is_a_gap(database: Database) -> None:
    _append(database, "s", 3)
    with database.transaction() as tx:
        tx.execute("DELETE FROM journal_events WHERE cursor = 2")
    with pytest.raises(JournalCorrupt), database.transaction() as tx:
        journal.verify_scope(tx, "s")


def _record(
    audit_id: str, scope_ref: str, receipts: tuple[DecisionReceipt, ...]
) -> audit.AuditRecord:
    return audit.AuditRecord(
        recorded_at="2026-01-01T00:00:00.000Z",
        audit_id=audit_id,
        scope_ref=scope_ref,
        principal_ref="p",
        agent_ref="g",
        session_ref="x",
        tool="t",
        outcome="ok",
        bundle_digest="d",
        bundle_revision="r",
        receipts=receipts,
    )


def _audit(db: Database, n: int) -> None:
    receipt = _receipt("engram/authz/decision")
    with db.transaction() as tx:
        for i in range(n):
            audit.append(tx, _record(f"a{i}", "s", (receipt,) if i == 0 else ()))


def test_audit_chain_and_receipts_verify(database: Database) -> None:
    _audit(database, 3)
    with database.transaction() as tx:
        assert audit.verify(tx) == (3, 1)


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE audit_entries SET outcome = 'UNAUTHORIZED' WHERE sequence = 2",
        "DELETE FROM audit_entries WHERE sequence = 2",
        "UPDATE decision_receipts SET reasons_json = '[]'",
        "DELETE FROM decision_receipts",
    ],
)
def test_any_edit_to_the_audit_trail_is_detected(database: Database, tamper: str) -> None:
    _audit(database, 3)
    with database.transaction() as tx:
        tx.execute(tamper)
    with pytest.raises(AuditChainBroken), database.transaction() as tx:
        audit.verify(tx)


def _receipt(path: str) -> DecisionReceipt:
    return make_receipt(
        policy_path=path,
        policy_input={"tool": "t"},
        result={"allow": True, "reasons": ["r"]},
        bundle_revision="rev",
        bundle_digest="sha256:" + "0" * 64,
        engine_id="test",
        engine_version="1",
        decided_at_ms=1,
    )


def test_a_group_of_entries_chains_in_order_and_each_keeps_its_own_receipts(
    database: Database,
) -> None:
    _audit(database, 1)
    records = [
        _record(f"group{i}", f"s{i}", tuple(_receipt(f"engram/p{i}/{k}") for k in range(i)))
        for i in range(4)
    ]
    with database.transaction() as tx:
        hashes = audit.append_all(tx, records)
    with database.transaction() as tx:
        assert audit.verify(tx) == (5, 1 + 0 + 1 + 2 + 3)
        assert tx.audit_head() == (5, hashes[-1])
        owners = tx.fetchall(
            "SELECT audit_id, scope_ref, policy_path FROM decision_receipts "
            "WHERE audit_id LIKE 'group%' ORDER BY policy_path"
        )
    assert owners == [
        (f"group{i}", f"s{i}", f"engram/p{i}/{k}") for i in range(4) for k in range(i)
    ]


def test_store_written_by_a_newer_schema_refuses_to_open(tmp_path: Path) -> None:
    db = Database.open(tmp_path)
    with db.transaction() as tx:
        tx.execute("INSERT INTO schema_migrations VALUES (999, '0999_future.sql', 'x')")
    db.close()
    with pytest.raises(StoreVersionSkew):
        Database.open(tmp_path)
