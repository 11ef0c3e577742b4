"""The kept semantic vectors (migration 0011, store/record_vectors.py, crypto/vector_seal.py):
written only while the record's lexical document exists, once per record and model, deleted
with the document in the tombstone's transaction, and sealed so that a row opens only as the
vector of its own scope, record and model."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from engram_memory.crypto.vector_seal import VectorSealer, at_stored_precision
from engram_memory.store.database import Database
from engram_memory.store.memory import purge_document
from engram_memory.store.record_vectors import keep_vectors, kept_vectors

SCOPE = "tenant:acme/workspace:support"
MODEL = "model:a"


def _kept(database: Database, model: str = MODEL) -> list[str]:
    with database.reading() as tx:
        return sorted(record_id for record_id, _, _ in kept_vectors(tx, SCOPE, model))


def test_a_vector_is_kept_only_while_its_document_exists_and_goes_with_it(
    tmp_path: Path,
) -> None:
    database = Database.open(tmp_path)
    try:
        with database.transaction() as tx:
            tx.execute("INSERT INTO lexical_documents VALUES (?, 'mem_live', '{}', NULL)", [SCOPE])
        rows = [(record_id, b"sealed", "c1 c2") for record_id in ("mem_live", "mem_forgotten")]
        for _ in range(2):  # written twice: kept once
            with database.transaction() as tx:
                keep_vectors(tx, SCOPE, MODEL, rows)
        assert _kept(database) == ["mem_live"]  # no document, no vector
        with database.transaction() as tx:
            keep_vectors(tx, SCOPE, "model:b", rows[:1])  # another model replaces the first
        assert (_kept(database), _kept(database, "model:b")) == ([], ["mem_live"])
        with database.transaction() as tx:
            purge_document(tx, SCOPE, "mem_live")
        assert _kept(database, "model:b") == []
        with database.reading() as tx:
            assert tx.fetchone("SELECT count(*) FROM record_vectors") == (0,)
    finally:
        database.close()


def test_a_sealed_vector_opens_only_as_its_own_scope_record_and_model() -> None:
    key = os.urandom(32)
    vector = np.random.default_rng(7).standard_normal(8).astype(np.float32)
    sealed = VectorSealer(key, SCOPE, MODEL).seal("mem_a", vector)
    assert vector.astype(np.float16).tobytes() not in sealed
    opened = VectorSealer(key, SCOPE, MODEL).open("mem_a", sealed, 8)
    assert opened is not None
    assert np.array_equal(opened, at_stored_precision(vector))
    assert VectorSealer(key, SCOPE, MODEL).open("mem_b", sealed, 8) is None
    assert VectorSealer(key, "tenant:x/workspace:y", MODEL).open("mem_a", sealed, 8) is None
    assert VectorSealer(key, SCOPE, "model:b").open("mem_a", sealed, 8) is None
    assert VectorSealer(os.urandom(32), SCOPE, MODEL).open("mem_a", sealed, 8) is None
    assert VectorSealer(key, SCOPE, MODEL).open("mem_a", sealed, 9) is None
    flipped = sealed[:-1] + bytes([sealed[-1] ^ 1])
    assert VectorSealer(key, SCOPE, MODEL).open("mem_a", flipped, 8) is None
