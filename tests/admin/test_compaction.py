"""`admin compact`: the store file is rewritten with live rows only and the old one shredded,
so deleted rows (a forgotten record's keyed term hashes) leave no residue in any file."""

from __future__ import annotations

import uuid

import pytest

from engram_memory.admin.compaction import CompactionService
from engram_memory.admin.maintenance import Operator
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.core.runtime import Services
from engram_memory.store import audit, journal
from engram_memory.store.connection import COMPACT_SUFFIX, RETIRED_SUFFIX
from tests.harness import Caller, ok_value
from tests.rules.steps import SCOPE, files_holding, search_ids
from tests.tools.test_tool_rules import accepted_record, capture, forget

DANA = Operator("acme", "support", "human:dana")  # maintain in acme/support only
ERIN = Operator("acme", "support", "human:erin")  # read only


def _term_hashes(services: Services, record_id: str) -> list[bytes]:
    with services.database.transaction() as tx:
        rows = tx.fetchall(
            "SELECT term_hash FROM lexical_postings WHERE scope_ref = ? AND record_id = ?",
            [SCOPE, record_id],
        )
    return [str(term).encode() for (term,) in rows]


def test_compaction_leaves_no_residue_of_forgotten_postings_and_keeps_everything_else(
    alice: Caller, services: Services
) -> None:
    kept_word, gone_word = f"kept{uuid.uuid4().hex}", f"gone{uuid.uuid4().hex}"
    kept = accepted_record(alice, f"Parcel {kept_word} refunded.")
    gone = accepted_record(alice, f"Parcel {gone_word} refunded.")
    # Only the forgotten record's own terms: words it shares with the kept one stay indexed.
    hashes = sorted(set(_term_hashes(services, gone)) - set(_term_hashes(services, kept)))
    assert hashes
    services.database.checkpoint()  # the postings reach the main file, as they do in time
    ok_value(forget(alice, gone))
    assert [h for h in hashes if files_holding(services, h)]  # the residue compaction removes

    lines: list[str] = []
    result = CompactionService(services).compact(DANA, lines.append)

    assert [h for h in hashes if files_holding(services, h)] == []
    assert result["bytes_after"] <= result["bytes_before"]
    assert lines[0].startswith("compact:")
    assert search_ids(alice, kept_word) == [kept]
    assert search_ids(alice, gone_word) == []
    with services.database.transaction() as tx:
        assert journal.verify_scope(tx, SCOPE) == 5  # 2 x (capture, accept) + tombstone
        entries, _ = audit.verify(tx)
        outcomes = tx.fetchall("SELECT outcome FROM audit_entries WHERE tool = 'admin:compact'")
    assert entries > 0
    assert outcomes == [("ok",)]  # audited into the new file
    assert capture(alice, "Written after compaction.")["status"] == "committed_pending"
    leftovers = [p.name for p in services.database.path.parent.iterdir() if p.is_file()]
    assert not [name for name in leftovers if name.endswith((COMPACT_SUFFIX, RETIRED_SUFFIX))]


def test_leftovers_of_an_interrupted_compaction_are_shredded(services: Services) -> None:
    path = services.database.path
    for suffix in (COMPACT_SUFFIX, RETIRED_SUFFIX):
        path.with_name(path.name + suffix).write_bytes(b"stale store bytes")
    CompactionService(services).compact(DANA, lambda _line: None)
    assert not path.with_name(path.name + COMPACT_SUFFIX).exists()
    assert not path.with_name(path.name + RETIRED_SUFFIX).exists()


@pytest.mark.parametrize("who", [ERIN, Operator("globex", "main", "human:dana")])
def test_compaction_needs_maintain_authority(services: Services, who: Operator) -> None:
    before = services.database.path.stat().st_ino
    with pytest.raises(ToolError) as refused:
        CompactionService(services).compact(who, lambda _line: None)
    assert refused.value.code is ErrorCode.UNAUTHORIZED
    assert services.database.path.stat().st_ino == before  # not rewritten
