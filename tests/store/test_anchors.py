"""Head anchors: MACed, advanced by every commit that moves a head, never backwards, and a
store behind its anchor is found however it lost its tail."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import AnchorInvalid, StoreBehindAnchor
from engram_memory.store import audit, journal
from engram_memory.store.anchors import AnchorFile, HeadAnchor, find_loss, open_anchor
from engram_memory.store.database import Database
from engram_memory.store.heads import ChainHeads

KEY = secrets.token_bytes(32)
SCOPE_A, SCOPE_B = "tenant:a/workspace:x", "tenant:b/workspace:y"


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = Database.open(tmp_path)
    yield db
    db.close()


def _record(n: int) -> audit.AuditRecord:
    return audit.AuditRecord(
        recorded_at="2026-01-01T00:00:00.000Z",
        audit_id=f"audit-{n}-{secrets.token_hex(4)}",
        scope_ref=SCOPE_A,
        principal_ref="p",
        agent_ref="a",
        session_ref="s",
        tool="engram_memory_capture",
        outcome="ok",
        bundle_digest="b",
        bundle_revision="r",
    )


def _write(db: Database, scope: str, n: int = 1) -> None:
    """n calls: each a journal event in `scope` and an audit entry, in one transaction."""
    for _ in range(n):
        with db.transaction() as tx:
            cursor = tx.journal_head(scope)[0] + 1
            journal.append(
                tx,
                scope,
                event_id=f"capture:{scope}:{cursor}",
                operation="capture",
                target_id=f"c{cursor}",
                fields={"digests": {"n": cursor}},
            )
            audit.append(tx, _record(cursor))


def _anchored(tmp_path: Path) -> ChainHeads:
    heads = AnchorFile(tmp_path, KEY).read()
    assert heads is not None
    return heads


def _reopen(db: Database, tmp_path: Path) -> Database:
    db.close()
    return Database.open(tmp_path)


def test_the_anchor_follows_every_commit_that_moves_a_head(
    database: Database, tmp_path: Path
) -> None:
    open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A, 2)
    _write(database, SCOPE_B)
    anchored = _anchored(tmp_path)
    assert anchored == database.heads()[1]
    assert anchored.audit[0] == 3
    assert anchored.journal_head(SCOPE_A)[0] == 2
    assert anchored.journal_head(SCOPE_B)[0] == 1


def test_a_rolled_back_transaction_leaves_the_cached_heads_and_the_anchor_alone(
    database: Database, tmp_path: Path
) -> None:
    open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A)
    before = database.heads()

    def failing_call() -> None:
        with database.transaction() as tx:
            audit.append(tx, _record(9))
            raise RuntimeError("the call fails after its audit append")

    with pytest.raises(RuntimeError):
        failing_call()
    assert database.heads() == before
    assert _anchored(tmp_path) == before[1]
    _write(database, SCOPE_A)  # the next entry takes the sequence the rolled back one had
    assert database.heads()[1].audit[0] == 2


def _slot_bytes(tmp_path: Path) -> list[bytes]:
    return [slot.read_bytes() for slot in AnchorFile(tmp_path, KEY).slots if slot.exists()]


def test_a_commit_already_covered_by_a_later_anchor_write_writes_nothing(
    database: Database, tmp_path: Path
) -> None:
    anchor = open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A, 2)
    written = _slot_bytes(tmp_path)
    anchor.cover(1)  # generation 1 was covered by the write of generation 2
    assert _slot_bytes(tmp_path) == written


def _tamper(slot: Path) -> None:
    document = json.loads(slot.read_text())
    document["heads"]["audit"]["entry_hash"] = "sha256:" + "f" * 64  # forge the head
    slot.write_text(json.dumps(document))


def test_a_changed_byte_in_both_anchor_slots_fails_their_mac(
    database: Database, tmp_path: Path
) -> None:
    open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A)
    for slot in AnchorFile(tmp_path, KEY).slots:
        _tamper(slot)
    with pytest.raises(AnchorInvalid):
        AnchorFile(tmp_path, KEY).read()
    with pytest.raises(StoreBehindAnchor):
        open_anchor(_reopen(database, tmp_path), tmp_path, KEY)


def test_a_torn_newest_slot_leaves_the_previous_advance_in_force(
    database: Database, tmp_path: Path
) -> None:
    open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A)
    previous = _anchored(tmp_path)
    _write(database, SCOPE_A)
    newest = max(AnchorFile(tmp_path, KEY).slots, key=lambda slot: slot.stat().st_mtime_ns)
    newest.write_bytes(newest.read_bytes()[:50])  # a crash in the middle of the write
    assert _anchored(tmp_path) == previous


def test_an_anchor_made_under_another_root_key_does_not_verify(
    database: Database, tmp_path: Path
) -> None:
    open_anchor(database, tmp_path, KEY)
    with pytest.raises(AnchorInvalid):
        AnchorFile(tmp_path, secrets.token_bytes(32)).read()
    assert AnchorFile(tmp_path, None).read() is not None  # auditors without it


def test_heads_that_moved_backwards_are_reported_as_regressions() -> None:
    later = ChainHeads((5, "h5"), {SCOPE_A: (3, "e3"), SCOPE_B: (1, "f1")})
    assert later.regressions_to(later) == []
    assert ChainHeads((4, "h4"), {SCOPE_A: (3, "e3")}).regressions_to(later) == []
    assert len(later.regressions_to(ChainHeads((4, "h4"), {SCOPE_A: (3, "e3")}))) == 2


def test_a_store_missing_its_audit_and_journal_tail_is_behind_its_anchor(
    database: Database, tmp_path: Path
) -> None:
    open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A, 3)
    with database.transaction() as tx:
        tx.execute("DELETE FROM journal_events WHERE cursor = 3")
        tx.execute("DELETE FROM audit_entries WHERE sequence = 3")
    database = _reopen(database, tmp_path)
    loss = find_loss(database, AnchorFile(tmp_path, KEY))
    assert loss is not None
    assert len(loss.problems) == 2
    with pytest.raises(StoreBehindAnchor):
        open_anchor(database, tmp_path, KEY)


def test_a_store_whose_anchored_entry_differs_is_behind_its_anchor(
    database: Database, tmp_path: Path
) -> None:
    open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A, 2)
    with database.transaction() as tx:
        tx.execute("UPDATE audit_entries SET entry_hash = 'sha256:rewritten' WHERE sequence = 2")
    with pytest.raises(StoreBehindAnchor):
        open_anchor(_reopen(database, tmp_path), tmp_path, KEY)


def test_a_scope_that_vanished_is_a_loss(database: Database, tmp_path: Path) -> None:
    open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A)
    _write(database, SCOPE_B)
    with database.transaction() as tx:
        tx.execute("DELETE FROM journal_events WHERE scope_ref = ?", [SCOPE_B])
    loss = find_loss(_reopen(database, tmp_path), AnchorFile(tmp_path, KEY))
    assert loss is not None
    assert len(loss.problems) == 1


def test_a_store_ahead_of_its_anchor_is_not_a_loss_and_is_anchored_again(
    database: Database, tmp_path: Path
) -> None:
    # A crash between COMMIT and the anchor write leaves the store ahead: nothing is lost.
    open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A)
    database.attach_anchor(None)
    _write(database, SCOPE_A, 2)
    database = _reopen(database, tmp_path)
    open_anchor(database, tmp_path, KEY)
    assert _anchored(tmp_path).audit[0] == 3


def test_a_missing_anchor_file_is_a_loss_once_the_store_was_anchored(
    database: Database, tmp_path: Path
) -> None:
    open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A)
    for slot in AnchorFile(tmp_path, KEY).slots:
        slot.unlink(missing_ok=True)
    with pytest.raises(StoreBehindAnchor):
        open_anchor(_reopen(database, tmp_path), tmp_path, KEY)


def test_a_store_that_predates_anchors_is_anchored_at_its_first_start(
    database: Database, tmp_path: Path
) -> None:
    _write(database, SCOPE_A, 2)  # written before anchors existed: no marker, no file
    open_anchor(database, tmp_path, KEY)
    assert _anchored(tmp_path).audit[0] == 2


def test_accepting_a_loss_re_anchors_at_the_store_heads(database: Database, tmp_path: Path) -> None:
    open_anchor(database, tmp_path, KEY)
    _write(database, SCOPE_A, 3)
    with database.transaction() as tx:
        tx.execute("DELETE FROM audit_entries WHERE sequence = 3")
    database = _reopen(database, tmp_path)
    anchor = open_anchor(database, tmp_path, KEY, tolerate_loss=True)
    assert isinstance(anchor, HeadAnchor)
    assert anchor.loss is not None
    _write(database, SCOPE_B)  # not anchored while the loss is pending
    assert _anchored(tmp_path).audit[0] == 3
    assert anchor.accept_loss() is not None
    assert _anchored(tmp_path) == database.heads()[1]
    open_anchor(_reopen(database, tmp_path), tmp_path, KEY)  # serves again
