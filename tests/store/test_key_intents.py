"""Durable key-destruction intents: they survive a reopen, stay single, and go once cleared;
stores written before them get every ended item's destruction promised again."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

import duckdb

from engram_memory.store import key_intents
from engram_memory.store.connection import DATABASE_FILE
from engram_memory.store.database import Database

SCOPE = "tenant:acme/workspace:support"


def test_a_promised_destruction_survives_a_reopen_until_cleared(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    with database.transaction() as tx:
        key_intents.promise(tx, SCOPE, ["cand_1", "mem_1"], "tombstone", 1)
    database.close()

    database = Database.open(tmp_path)
    with database.transaction() as tx:
        assert key_intents.pending(tx) == [(SCOPE, "cand_1"), (SCOPE, "mem_1")]
        key_intents.clear(tx, [(SCOPE, "cand_1")])
    with database.transaction() as tx:
        assert key_intents.pending(tx) == [(SCOPE, "mem_1")]
        assert key_intents.pending_in_scope(tx, SCOPE, ["cand_1", "mem_1"]) == {"mem_1"}
    database.close()


def test_an_item_named_twice_in_one_promise_is_promised_once(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    with database.transaction() as tx:
        key_intents.promise(tx, SCOPE, ["cand_1", "cand_1"], "withdraw", 1)
        assert key_intents.pending(tx) == [(SCOPE, "cand_1")]
    database.close()


def test_clearing_pairs_of_several_scopes_removes_exactly_those(tmp_path: Path) -> None:
    other = "tenant:globex/workspace:main"
    database = Database.open(tmp_path)
    with database.transaction() as tx:
        key_intents.promise(tx, SCOPE, ["cand_1", "cand_2"], "withdraw", 1)
        key_intents.promise(tx, other, ["cand_1"], "withdraw", 1)
        key_intents.clear(tx, [(SCOPE, "cand_2"), (other, "cand_1")])
        assert key_intents.pending(tx) == [(SCOPE, "cand_1")]
    database.close()


def _store_at_version_2(path: Path) -> None:
    """A store as the release before key intents left it: migrations 1 and 2 only."""
    folder = resources.files("engram_memory.store").joinpath("migrations")
    connection = duckdb.connect(str(path / DATABASE_FILE))
    connection.execute(
        "CREATE TABLE schema_migrations ("
        "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, sha256 VARCHAR NOT NULL)"
    )
    for version, name in ((1, "0001_initial.sql"), (2, "0002_record_successor.sql")):
        sql = folder.joinpath(name).read_text(encoding="utf-8")
        connection.execute(sql)
        checksum = hashlib.sha256(sql.encode("utf-8")).hexdigest()
        connection.execute(
            "INSERT INTO schema_migrations VALUES (?, ?, ?)", [version, name, checksum]
        )
    for candidate, state in (("cand_pending", "pending"), ("cand_promoted", "promoted")):
        connection.execute(
            "INSERT INTO candidates VALUES (?, ?, ?, 'p', 'd', 'g', 'r', ?, 1, 'sealed', 0, 0)",
            [SCOPE, candidate, state, f"mem_{candidate}"],
        )
    for record, state in (("mem_live", "accepted_current"), ("mem_forgotten", "tombstoned")):
        connection.execute(
            "INSERT INTO records VALUES "
            "(?, ?, 'c', ?, 'd', 'p', 'g', 1, 1, 0, NULL, NULL, NULL, 0, NULL)",
            [SCOPE, record, state],
        )
    connection.close()


def test_migrating_an_older_store_promises_the_destructions_it_never_recorded(
    tmp_path: Path,
) -> None:
    _store_at_version_2(tmp_path)

    database = Database.open(tmp_path)
    with database.transaction() as tx:
        promised = key_intents.pending(tx)
        keys = sorted(key_intents.item_keys(tx))
    database.close()

    assert promised == [(SCOPE, "cand_promoted"), (SCOPE, "mem_forgotten")]
    # The promoted candidate's body is gone; the pending one keeps it.
    assert [(k.item_id, k.live) for k in keys if k.item_id.startswith("cand")] == [
        ("cand_pending", True),
        ("cand_promoted", False),
    ]
