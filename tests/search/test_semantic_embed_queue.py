"""The semantic projection's queue of records to embed (core/semantic_index.py): a committed
record's citations count at once, its vector only once the embedder stores it (at the float16
precision it is kept at), and a batch embedded while its record was purged or re-sent never
overwrites the newer state nor is handed on to be kept."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engram_memory.core.semantic_index import Embedded, Queued, SemanticProjection
from engram_memory.crypto.vector_seal import at_stored_precision
from engram_memory.search.embedding import EmbeddingModel, load_embedding_model
from engram_memory.store.index_changes import RecordEmbedded

SCOPE = "tenant:acme/workspace:support"


@pytest.fixture(scope="module")
def model() -> EmbeddingModel:
    loaded = load_embedding_model()
    assert isinstance(loaded, EmbeddingModel), loaded  # the [semantic] extra is a test dependency
    return loaded


def _change(record_id: str, text: str, citations: tuple[str, ...] = ()) -> RecordEmbedded:
    return RecordEmbedded(SCOPE, record_id, text, citations)


def _store(model: EmbeddingModel, projection: SemanticProjection, batch: list[Queued]) -> Any:
    prepared = [(pending.text or "", pending.citation_keys or ()) for _, pending in batch]
    return projection.store(batch, prepared, model.embed([text for text, _ in prepared]))


def test_a_committed_record_is_queued_then_stored_in_one_batch(model: EmbeddingModel) -> None:
    projection = SemanticProjection(model, {})
    for slot in range(3):
        projection.embedded(_change(f"mem_{slot}", f"refund number {slot}", ("c",)), slot)
    scope = projection.scope(SCOPE)
    assert projection.has_queued(SCOPE)
    assert not projection.has_queued("tenant:other/workspace:x")
    assert scope.vector_count() == 0
    assert len(scope.edge_rows()) == 6  # the shared citation links all three at once
    taken: list[Embedded] = _store(model, projection, projection.next_batch())
    assert not projection.queued
    assert scope.vector_count() == 3
    assert [item.record_id for item in taken] == ["mem_0", "mem_1", "mem_2"]
    expected = at_stored_precision(model.embed(["refund number 1"]))[0]
    assert dict(scope.vector_rows())[1] == tuple(float(x) for x in expected)
    assert np.array_equal(taken[1].vector, expected)


def test_a_batch_never_overwrites_a_purge_or_a_newer_text(model: EmbeddingModel) -> None:
    projection = SemanticProjection(model, {})
    projection.embedded(_change("mem_a", "old text"), 0)
    projection.embedded(_change("mem_b", "purged text"), 1)
    batch = projection.next_batch()
    projection.embedded(_change("mem_a", "new text"), 0)  # re-sent while the batch embedded
    projection.purged(SCOPE, 1)  # forgotten while the batch embedded
    assert _store(model, projection, batch) == []  # nothing of it is kept either
    scope = projection.scope(SCOPE)
    assert not scope.has_vector(0)
    assert not scope.has_vector(1)
    assert [pending.text for pending in projection.queued.values()] == ["new text"]
    _store(model, projection, projection.next_batch())
    assert np.array_equal(
        np.array(dict(scope.vector_rows())[0], dtype=np.float32),
        at_stored_precision(model.embed(["new text"]))[0],
    )
    assert not scope.has_vector(1)
