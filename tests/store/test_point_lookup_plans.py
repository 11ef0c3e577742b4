"""Item 7: every point lookup of the hot path is served by an index, never a table scan.

DuckDB 2.0 decides on an index scan at execution time (plain EXPLAIN always shows a
sequential scan), so the plans are read from EXPLAIN ANALYZE on a store with rows in every
table. The journal head is not here: it is answered by the writer's head cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.store.connection import load_queries
from engram_memory.store.database import Database

_MEMORY = load_queries("engram_memory.store.sql", "memory.sql")
_JOURNAL = load_queries("engram_memory.store.sql", "journal.sql")
_AUDIT = load_queries("engram_memory.store.sql", "audit.sql")
ROWS = 3000

_FILL = [
    "INSERT INTO idempotency SELECT 'scope', 'p', 'key' || i, 't', 'op', 'completed', '{}', 0 "
    "FROM range(?) r(i)",
    "INSERT INTO journal_events SELECT 'scope', i + 1, 'capture:c' || i, 'capture', 'c' || i, "
    "'{}', 'h', 'h' || i, 'i' FROM range(?) r(i)",
    "INSERT INTO candidates SELECT 'scope', 'c' || i, 'pending', 'p', 'd', 'g', 'r', 'rec' || i, "
    "i + 1, 'x'::BLOB, 0, 0 FROM range(?) r(i)",
    "INSERT INTO records SELECT 'scope', 'rec' || i, 'c' || i, 'accepted_current', 'r', 'd', "
    "'g', i + 1, i + 1, 0, NULL, NULL, 'x'::BLOB, 0, NULL FROM range(?) r(i)",
    # Named columns: later migrations add optional (NULL) audit columns.
    "INSERT INTO audit_entries (sequence, recorded_at, audit_id, scope_ref, principal_ref, "
    "agent_ref, session_ref, tool, outcome, target_ids_json, receipt_digests_json, "
    "bundle_digest, bundle_revision, idempotency_key_digest, detail, previous_hash, entry_hash) "
    "SELECT i + 1, 't', 'a', 's', 'p', 'ag', 'se', 'tool', 'ok', "
    "'[]', '[]', 'b', 'r', '', '', 'h', 'e' || i FROM range(?) r(i)",
    "INSERT INTO consumed_confirmations SELECT 'jti' || i, 'scope', 'tool', 0 FROM range(?) r(i)",
]

LOOKUPS = {
    "idempotency": (_MEMORY["get_idempotency"], ["key77"]),
    "journal event by id": (_JOURNAL["by_event_id"], ["capture:c77"]),
    "candidate": (_MEMORY["get_candidate"], ["c77"]),
    "record": (_MEMORY["get_record"], ["rec77"]),
    "record successor": (_MEMORY["get_successor"], ["rec77"]),
    "audit head": (_AUDIT["head"], []),
    "confirmation used": (_MEMORY["confirmation_used"], ["jti77"]),
}


@pytest.fixture(scope="module")
def filled_store(tmp_path_factory: pytest.TempPathFactory) -> Database:
    database = Database.open(Path(tmp_path_factory.mktemp("plans")))
    with database.transaction() as tx:
        for statement in _FILL:
            tx.execute(statement, [ROWS])
    database.checkpoint()
    return database


@pytest.mark.parametrize("lookup", sorted(LOOKUPS))
def test_a_point_lookup_is_an_index_scan_and_never_a_sequential_scan(
    filled_store: Database, lookup: str
) -> None:
    sql, params = LOOKUPS[lookup]
    with filled_store.reading() as tx:
        assert tx.fetchall(sql, params), "the lookup must find its row"
        plan = "\n".join(str(row[-1]) for row in tx.fetchall("EXPLAIN ANALYZE " + sql, params))
    assert "Index Scan" in plan, plan
    assert "Sequential Scan" not in plan, plan
