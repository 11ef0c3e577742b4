"""store/audit.py with migration 0006: the host-stream columns are hashed only when set, so
entries written before re-derive unchanged; token-bound audit ids are unique while kept."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from engram_memory.contract.digests import ZERO_DIGEST, digest
from engram_memory.contract.exceptions import AuditChainBroken, StoreUnavailable
from engram_memory.store import audit
from engram_memory.store.database import Database

PLAIN = audit.AuditRecord(
    recorded_at="2026-01-01T00:00:00.000Z",
    audit_id="audit:1",
    scope_ref="tenant:acme/workspace:support",
    principal_ref="p",
    agent_ref="g",
    session_ref="s",
    tool="engram_memory_get",
    outcome="ok",
    bundle_digest="d",
    bundle_revision="r",
)
SUMMARY = replace(
    PLAIN,
    audit_id="host:1",
    scope_ref="host",
    outcome="refused",
    transport="http",
    peer="127.0.0.1",
    reason="token_invalid",
    occurrences=42,
    first_at="2026-01-01T00:00:00.000Z",
    last_at="2026-01-01T00:00:59.000Z",
)


@pytest.fixture
def database(tmp_path: Path) -> Database:
    return Database.open(tmp_path / "data")


def test_an_entry_without_the_new_columns_hashes_exactly_as_before(database: Database) -> None:
    with database.transaction() as tx:
        (stored,) = audit.append_all(tx, [PLAIN])
    # The entry dict of migrations 0001-0005, field by field.
    before = {
        "sequence": 1,
        "recorded_at": PLAIN.recorded_at,
        "audit_id": PLAIN.audit_id,
        "scope_ref": PLAIN.scope_ref,
        "principal_ref": "p",
        "agent_ref": "g",
        "session_ref": "s",
        "tool": PLAIN.tool,
        "outcome": "ok",
        "target_ids": [],
        "receipt_digests": [],
        "bundle_digest": "d",
        "bundle_revision": "r",
        "idempotency_key_digest": "",
        "detail": "",
        "previous_hash": ZERO_DIGEST,
    }
    assert stored == digest("audit-entry", before, field="entry_hash")


def test_a_summary_entry_verifies_and_its_count_cannot_be_changed(database: Database) -> None:
    with database.transaction() as tx:
        audit.append_all(tx, [PLAIN, SUMMARY])
    with database.reading() as tx:
        assert audit.verify(tx) == (2, 0)
        row = tx.fetchone(
            "SELECT transport, peer, reason, occurrences FROM audit_entries WHERE sequence = 2"
        )
    assert row == ("http", "127.0.0.1", "token_invalid", 42)
    with database.transaction() as tx:
        tx.execute("UPDATE audit_entries SET occurrences = 41 WHERE sequence = 2")
    with pytest.raises(AuditChainBroken), database.reading() as tx:
        audit.verify(tx)


def test_a_second_entry_for_a_kept_audit_id_fails_its_transaction(database: Database) -> None:
    bound = replace(PLAIN, audit_id_kept_until_ms=10_000)
    with database.transaction() as tx:
        audit.append_all(tx, [bound])
    with pytest.raises(StoreUnavailable), database.transaction() as tx:
        audit.append_all(tx, [replace(bound, outcome="INVALID_SCHEMA")])
    with database.reading() as tx:
        assert audit.verify(tx) == (1, 0)
        assert audit.used_audit_ids(tx, now_ms=0) == [("audit:1", 10_000)]


def test_expired_audit_ids_are_pruned_and_no_longer_reported(database: Database) -> None:
    with database.transaction() as tx:
        audit.claim_audit_ids(tx, [("audit:old", 1_000), ("audit:new", 9_000)])
    with database.transaction() as tx:
        audit.prune_used_audit_ids(tx, now_ms=1_000)
    with database.reading() as tx:
        assert audit.used_audit_ids(tx, now_ms=0) == [("audit:new", 9_000)]
        rows = tx.fetchall("SELECT audit_id FROM used_audit_ids")
    assert json.dumps(rows) == json.dumps([["audit:new"]])
