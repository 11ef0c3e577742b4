"""Issue 3, rule 7 — crypto-shredding, proven by scanning every byte of the data directory.

Also proven in tests/tools/test_tool_rules.py and end to end in tests/e2e (see
tests/RULES.md).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.runtime import Services
from tests.harness import Caller, fresh_key, ok_value
from tests.rules.steps import CAPTURE, SCOPE, count_rows, files_holding, search_ids
from tests.tools.test_tool_rules import admit, capture, forget, withdraw


def _postings(services: Services, record_id: str) -> int:
    with services.database.transaction() as tx:
        rows = [
            tx.fetchone(
                f"SELECT count(*) FROM {table} WHERE scope_ref = ? AND record_id = ?",  # noqa: S608
                [SCOPE, record_id],
            )
            for table in ("lexical_postings", "lexical_documents")
        ]
    return sum(int(row[0]) for row in rows if row is not None)


def _term_hashes(services: Services, record_id: str) -> list[str]:
    with services.database.transaction() as tx:
        rows = tx.fetchall(
            "SELECT term_hash FROM lexical_postings WHERE scope_ref = ? AND record_id = ?",
            [SCOPE, record_id],
        )
    return [str(row[0]) for row in rows]


def test_crypto_shredding_forget_leaves_zero_bytes_of_wrapped_keys_or_canary(
    alice: Caller, services: Services
) -> None:
    canary = f"canary{uuid.uuid4().hex}"
    args = demo_capture_arguments(f"Refund for parcel {canary} approved.", fresh_key())
    candidate_id = ok_value(alice.call(CAPTURE, args))["candidate_id"]
    candidate_key = services.keys.get(SCOPE, candidate_id)
    record_id = ok_value(admit(alice, candidate_id))["outcome"]["record_id"]
    record_key = services.keys.get(SCOPE, record_id)
    assert candidate_key is not None
    assert record_key is not None
    assert files_holding(services, record_key)  # the scan sees a live key
    assert search_ids(alice, canary) == [record_id]
    assert _postings(services, record_id) > 0

    forgotten = ok_value(forget(alice, record_id))

    assert forgotten["projection_invalidation"] == "complete"
    assert "coverage_receipt_digest" in forgotten
    for needle in (record_key, candidate_key, canary.encode(), canary.upper().encode()):
        assert files_holding(services, needle) == []
    assert _postings(services, record_id) == 0  # lexical postings gone
    assert search_ids(alice, canary) == []


@pytest.mark.parametrize("tool", ["forget", "withdraw"])
def test_crypto_shredding_reports_complete_only_when_the_key_is_destroyed(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    if tool == "forget":
        target = ok_value(admit(alice, capture(alice, "Shred later.")["candidate_id"]))["outcome"][
            "record_id"
        ]
    else:
        target = capture(alice, "Withdraw, shred later.")["candidate_id"]
    wrapped = services.keys.get(SCOPE, target)
    assert wrapped is not None
    key = fresh_key(tool)

    def act() -> dict[str, Any]:
        call = forget if tool == "forget" else withdraw
        return ok_value(call(alice, target, key))

    with monkeypatch.context() as patch:
        patch.setattr(services.keys, "destroy", lambda *_a, **_k: False)  # the shred fails
        first = act()
    if tool == "forget":
        assert first["projection_invalidation"] == "pending"
        assert "coverage_receipt_digest" not in first
    else:
        assert first["key_destruction"] == "pending"
    assert files_holding(services, wrapped)  # and indeed the key is still there

    replay = act()  # the replay reports the current truth, and retries the shred
    assert replay["replayed"] is True
    if tool == "forget":
        assert replay["projection_invalidation"] == "complete"
        assert "coverage_receipt_digest" in replay
    else:
        assert replay["key_destruction"] == "complete"
    assert files_holding(services, wrapped) == []
    assert count_rows(services, "journal_events") == (3 if tool == "forget" else 2)
