"""Issue 7 item 6: an admission stages its record's index rows outside the writer's lock.

They commit before the accept transaction, stay invisible until the record row commits, are
identical to what indexing inside the transaction writes, and never outlive a failed accept
(a rolled-back one removes them; after an unknown outcome the retry's staging or the start-up
sweep does), so postings are never doubled.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engram_memory.contract.exceptions import CommitOutcomeUnknown, StoreUnavailable
from engram_memory.core import indexing
from engram_memory.core.opening import open_store
from engram_memory.core.runtime import CallContext, Services
from engram_memory.core.service_config import EMBEDDED, ServiceConfig
from engram_memory.store import key_intents, memory
from engram_memory.store.side_writes import sweep_orphan_index
from tests.harness import Caller
from tests.rules.steps import SCOPE, search_ids
from tests.tools.test_tool_rules import admit, capture, code, value

Rows = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    # A short record then stages, in several transactions, as a ~1 MiB one does.
    monkeypatch.setattr(indexing, "POSTINGS_PER_BATCH", 4)
    monkeypatch.setattr(indexing, "STAGE_FROM_POSTINGS", 1)


def _rows(services: Services, record_id: str) -> Rows:
    """(document rows, postings) of `record_id`, as a snapshot sees them."""
    with services.database.reading() as tx:
        documents = tx.fetchall(
            "SELECT field_lengths_json, valid_t_end FROM lexical_documents"
            " WHERE scope_ref = ? AND record_id = ?",
            [SCOPE, record_id],
        )
        postings = tx.fetchall(
            "SELECT term_hash, field, tf FROM lexical_postings"
            " WHERE scope_ref = ? AND record_id = ?",
            [SCOPE, record_id],
        )
    return documents, sorted(postings)


def _assert_indexed_once(rows: Rows) -> None:
    documents, postings = rows
    assert len(documents) == 1
    assert len(postings) > 2 * indexing.POSTINGS_PER_BATCH  # staged in several batches
    assert len({(term, field) for term, field, _ in postings}) == len(postings)  # no doubles


def _pending(alice: Caller, text: str) -> tuple[str, str]:
    """(candidate id, record id) of a fresh pending candidate."""
    candidate_id = str(capture(alice, text)["candidate_id"])
    with alice.service.services.database.reading() as tx:
        candidate = memory.get_candidate(tx, SCOPE, candidate_id)
    assert candidate is not None
    return candidate_id, candidate.record_id


def _text(word: str) -> str:
    return f"Refund {word} approved for the parcel the courier lost near the northern depot."


def _failing_promote(failure: Exception) -> Callable[..., None]:
    def promote(*_args: object, **_kwargs: object) -> None:
        raise failure

    return promote


def test_staged_rows_are_invisible_until_the_record_commits_and_match_indexing_in_the_writer(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    word = f"zq{uuid.uuid4().hex[:12]}"
    candidate_id, record_id = _pending(alice, _text(word))
    from engram_memory.core import mutation

    seen: dict[str, Any] = {}
    computed: list[tuple[CallContext, Any]] = []
    # The write transaction of a mutation, entered once its index is staged.
    commit, record_index = mutation._transaction, indexing.record_index

    def commit_after_looking(*args: Any) -> mutation.Committed:
        # Another caller's search runs on its own thread, as in the server.
        with ThreadPoolExecutor(1) as other:
            seen["search"] = other.submit(search_ids, alice, word).result()
        seen["rows"] = _rows(services, record_id)
        return commit(*args)

    def remembered(ctx: CallContext, record: Any) -> indexing.RecordIndex:
        computed.append((ctx, record))
        return record_index(ctx, record)

    monkeypatch.setattr(mutation, "_transaction", commit_after_looking)
    monkeypatch.setattr(indexing, "record_index", remembered)

    assert value(admit(alice, candidate_id))["outcome"]["record_id"] == record_id

    assert seen["search"] == []  # staged and committed, yet not found
    _assert_indexed_once(seen["rows"])
    assert _rows(services, record_id) == seen["rows"]  # the accept wrote no further rows
    assert search_ids(alice, word) == [record_id]
    # What indexing inside the writer's transaction writes (host adjudication) is the same.
    ctx, record = computed[0]
    with services.database.transaction() as tx:
        indexing.purge_record(tx, ctx, record_id)
        indexing.index_record(tx, ctx, record)
    assert _rows(services, record_id) == seen["rows"]
    assert search_ids(alice, word) == [record_id]


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (StoreUnavailable("rolled back"), "STORE_UNAVAILABLE"),
        (CommitOutcomeUnknown("commit failed"), "MUTATION_OUTCOME_UNKNOWN"),
    ],
    ids=["rolled-back", "outcome-unknown"],
)
def test_a_failed_accept_leaves_no_index_rows_and_the_retry_indexes_once(
    alice: Caller,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    failure: Exception,
    error: str,
) -> None:
    word = f"zq{uuid.uuid4().hex[:12]}"
    candidate_id, record_id = _pending(alice, _text(word))
    key = f"key-{uuid.uuid4().hex}"
    with monkeypatch.context() as patch:
        patch.setattr("engram_memory.core.admission_outcome.promote", _failing_promote(failure))
        assert code(admit(alice, candidate_id, key)) == error

    documents, postings = _rows(services, record_id)
    if isinstance(failure, CommitOutcomeUnknown):
        # It may have committed: the staged rows stay, unseen, for the retry to replace.
        assert len(documents) == 1
        assert postings
    else:
        assert (documents, postings) == ([], [])
    assert search_ids(alice, word) == []

    assert value(admit(alice, candidate_id, key))["outcome"]["record_id"] == record_id
    _assert_indexed_once(_rows(services, record_id))
    assert search_ids(alice, word) == [record_id]


def test_a_refused_accept_removes_its_staged_rows(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate_id, record_id = _pending(alice, _text("refused"))
    from engram_memory.core import mutation

    commit = mutation._transaction

    def withdraw() -> None:
        with services.database.transaction() as tx:
            key_intents.end_candidate(tx, SCOPE, candidate_id, "withdrawn", 0)

    def withdrawn_meanwhile(*args: Any) -> mutation.Committed:
        with ThreadPoolExecutor(1) as other:  # by another call, on its own thread
            other.submit(withdraw).result()
        return commit(*args)

    monkeypatch.setattr(mutation, "_transaction", withdrawn_meanwhile)
    assert code(admit(alice, candidate_id)) == "NOT_FOUND"
    assert _rows(services, record_id) == ([], [])


def test_start_up_sweeps_staged_rows_of_records_that_never_committed(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    committed = value(admit(alice, _pending(alice, _text("kept"))[0]))["outcome"]["record_id"]
    kept = _rows(services, committed)
    candidate_id, orphan = _pending(alice, _text("orphaned"))
    with monkeypatch.context() as patch:
        unknown = _failing_promote(CommitOutcomeUnknown("commit failed"))
        patch.setattr("engram_memory.core.admission_outcome.promote", unknown)
        assert code(admit(alice, candidate_id)) == "MUTATION_OUTCOME_UNKNOWN"
    assert _rows(services, orphan)[0]  # the leftover the start-up sweep is for
    services.database.close()

    config = ServiceConfig(
        data_dir=tmp_path / "data",
        host_keys=tmp_path / "unused",
        root_key=tmp_path / "unused",
        policy=EMBEDDED,
        bundle=None,
        memory_enabled=True,
    )
    database = open_store(config, services.root_key)
    try:
        reopened = replace(services, database=database)
        assert _rows(reopened, orphan) == ([], [])
        assert _rows(reopened, committed) == kept
        with database.transaction() as tx:
            assert sweep_orphan_index(tx) == 0  # nothing left: a read only
    finally:
        database.close()


def _side_writes(services: Services, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Counts the side writes of `services`' store from here on (an observer only)."""
    opened = [0]
    inner = services.database.side_write

    def counted() -> Any:
        opened[0] += 1
        return inner()

    monkeypatch.setattr(services.database, "side_write", counted)
    return lambda: opened[0]


def test_a_small_record_is_indexed_in_the_accept_transaction_without_staging(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(indexing, "STAGE_FROM_POSTINGS", 10_000)
    side_writes = _side_writes(services, monkeypatch)
    candidate_id, record_id = _pending(alice, "Refund approved for a small record.")
    assert value(admit(alice, candidate_id))["outcome"]["status"] == "accepted"
    documents, postings = _rows(services, record_id)
    assert (len(documents), bool(postings), side_writes()) == (1, True, 0)
