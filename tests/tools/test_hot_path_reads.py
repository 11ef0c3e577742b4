"""Item 7: the hot path reads no chain head from the store; the writer's head cache answers."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from engram_memory.core.runtime import Services
from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record, capture, forget, value, withdraw

_HEADS = load_queries("engram_memory.store.sql", "heads.sql")
_JOURNAL = load_queries("engram_memory.store.sql", "journal.sql")
_AUDIT = load_queries("engram_memory.store.sql", "audit.sql")
HEAD_QUERIES = {
    "audit head": _AUDIT["head"],
    "journal head": _JOURNAL["head"],
    "every journal head": _HEADS["journal_heads"],
    "audit head at open": _HEADS["audit_head"],
}


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each statement text ran in a transaction from here on (an observer only)."""
    seen: Counter[str] = Counter()
    for name in ("execute", "executemany", "fetchall", "fetchone"):
        original = getattr(Transaction, name)

        def observed(tx: Transaction, sql: str, *args: Any, _original: Any = original) -> Any:
            seen[sql] += 1
            return _original(tx, sql, *args)

        monkeypatch.setattr(Transaction, name, observed)
    return seen


def test_no_call_of_any_tool_reads_a_chain_head_from_the_store(
    alice: Caller, services: Services, statements: Counter[str]
) -> None:
    record_id = accepted_record(alice)
    value(
        alice.call("engram_memory_get", {"record_id": record_id, "purpose_ref": alice.purpose_ref})
    )
    value(alice.call("engram_memory_search", {"query": "refund", "purpose_ref": alice.purpose_ref}))
    value(forget(alice, record_id))
    value(withdraw(alice, capture(alice)["candidate_id"]))
    assert statements, "the observer must see the calls' statements"
    read = {name: statements[sql] for name, sql in HEAD_QUERIES.items() if statements[sql]}
    assert read == {}
