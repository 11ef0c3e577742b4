"""What the writer publishes after each COMMIT: a write transaction may skip re-reading a key a
snapshot found absent only when no commit since wrote it."""

from __future__ import annotations

from pathlib import Path

from engram_memory.store import memory
from engram_memory.store.database import Database
from engram_memory.store.heads import ChainHeads
from engram_memory.store.published import Publication

SCOPE, PRINCIPAL = "tenant:acme/workspace:support", "principal:alice"


def test_a_key_written_after_a_snapshot_is_written_since_and_others_are_not() -> None:
    published = Publication(ChainHeads())
    first = published.publish(None, {}, ["k-before"])
    snapshot, _ = published.current()
    published.publish(None, {}, ["k-after"])
    assert first == snapshot == 1
    assert published.written_since("k-after", snapshot)
    assert not published.written_since("k-before", snapshot)
    assert not published.written_since("k-never", snapshot)


def test_a_commit_that_publishes_nothing_has_no_generation() -> None:
    published = Publication(ChainHeads())
    assert published.publish(None, {}, []) == 0
    assert published.current()[0] == 0


def test_a_snapshot_older_than_what_the_ledger_forgot_always_reads_again() -> None:
    published = Publication(ChainHeads(), recent_keys=2)
    old_snapshot, _ = published.current()
    for n in range(3):
        published.publish(None, {}, [f"k{n}"])
    recent_snapshot, _ = published.current()
    assert published.written_since("k-never", old_snapshot)  # k0 was forgotten
    assert not published.written_since("k-never", recent_snapshot)


def _put(database: Database, key_digest: str) -> None:
    with database.transaction() as tx:
        memory.put_idempotency(
            tx,
            SCOPE,
            PRINCIPAL,
            key_digest,
            tool="t",
            operation_digest="op",
            result_json="{}",
            now_ms=1,
        )


def test_a_racing_commit_after_the_snapshot_is_found_by_the_write_transaction(
    tmp_path: Path,
) -> None:
    database = Database.open(tmp_path)
    with database.reading() as snapshot:
        assert memory.get_idempotency(snapshot, SCOPE, PRINCIPAL, "key-1") is None
        seen_at = snapshot.generation
    _put(database, "key-1")  # a racing call with the same key committed meanwhile
    with database.transaction() as tx:
        row = memory.get_idempotency(tx, SCOPE, PRINCIPAL, "key-1", absent_at=seen_at)
        missing = memory.get_idempotency(tx, SCOPE, PRINCIPAL, "key-2", absent_at=seen_at)
    assert row is not None
    assert row.operation_digest == "op"
    assert missing is None
    database.close()


def test_a_key_committed_before_the_snapshot_is_in_the_snapshot(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    _put(database, "key-1")
    with database.reading() as snapshot:
        assert memory.get_idempotency(snapshot, SCOPE, PRINCIPAL, "key-1") is not None
    database.close()
