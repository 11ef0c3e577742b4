"""The semantic vectors kept in the store (store/record_vectors.py, sealed by
crypto/vector_seal.py): loaded into the projection at open, written by the embedder after it
embedded a batch, and read back as bodies for the records that have none kept.

Kept vectors are an accelerator, never a source of truth: a row that does not open is
embedded again from its record's body, and a batch that cannot be written is logged and
embedded again at the next start. They are never kept for a record whose lexical document is
gone (a forget or withdraw removes both in its tombstone's transaction).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from engram_memory.contract.exceptions import CommitOutcomeUnknown, StoreCorrupt, StoreUnavailable
from engram_memory.core.semantic_index import (
    BodyOpener,
    Embedded,
    Prepared,
    Queued,
    SemanticProjection,
    citation_keys,
)
from engram_memory.crypto.vector_seal import VectorSealer
from engram_memory.search.embedding import EmbeddingModel, Vectors, record_text
from engram_memory.search.fields import keyed_term_hasher
from engram_memory.search.scope_index import ScopeIndex
from engram_memory.store.database import Database
from engram_memory.store.record_vectors import keep_vectors, kept_vectors, sealed_bodies
from engram_memory.store.transaction import Transaction

log = logging.getLogger("engram_memory.semantic_index")


class VectorKeeping:
    """Reads and writes one store's kept vectors for the semantic projection."""

    def __init__(
        self,
        database: Database,
        model: EmbeddingModel,
        open_body: BodyOpener,
        scope_key: Callable[[str], bytes],
        vector_key: Callable[[str], bytes],
    ) -> None:
        self._database = database
        self._model = model
        self._open_body = open_body
        self._scope_key = scope_key
        self._vector_key = vector_key
        self._sealers: dict[str, VectorSealer] = {}

    @property
    def model(self) -> EmbeddingModel:
        return self._model

    def _sealer(self, scope_ref: str) -> VectorSealer:
        found = self._sealers.get(scope_ref)
        if found is None:
            found = VectorSealer(self._vector_key(scope_ref), scope_ref, self._model.model_ref)
            self._sealers[scope_ref] = found
        return found

    def load(self, tx: Transaction, lexical: Mapping[str, ScopeIndex]) -> SemanticProjection:
        """The projection of every kept vector `tx` sees; every other indexed record is
        queued for the embedder (its body is opened after serving started)."""
        projection = SemanticProjection(self._model, {})
        dimensions = self._model.dimensions
        unopened = 0
        for scope_ref, index in lexical.items():
            sealer = self._sealer(scope_ref)
            slots: list[int] = []
            vectors: list[Vectors] = []
            citations: list[tuple[str, ...]] = []
            for record_id, sealed, keys in kept_vectors(tx, scope_ref, self._model.model_ref):
                vector = sealer.open(record_id, sealed, dimensions)
                if vector is None:
                    unopened += 1
                    continue
                slots.append(index.slot_of(record_id))
                vectors.append(vector)
                citations.append(tuple(keys.split()))
            stacked = np.stack(vectors) if vectors else np.zeros((0, dimensions), np.float32)
            projection.load_scope(scope_ref, index.record_ids, slots, stacked, citations)
        if unopened:
            log.warning("semantic index: %d kept vector(s) did not open; embedded again", unopened)
        if projection.queued:
            log.info(
                "semantic index: %d record(s) without a kept vector, embedded while serving",
                len(projection.queued),
            )
        return projection

    def prepare(self, batch: Sequence[Queued]) -> list[Prepared]:
        """Each queued record's text and citation keys: from its commit, or from its body,
        read and opened now (None when no body opens). Runs without the index's lock.

        Raises:
            StoreUnavailable / StoreCorrupt: the bodies could not be read.
        """
        missing: defaultdict[str, list[str]] = defaultdict(list)
        for (scope_ref, _), pending in batch:
            if pending.text is None:
                missing[scope_ref].append(pending.record_id)
        opened: dict[tuple[str, str], Mapping[str, Any]] = {}
        if missing:
            with self._database.reading(audit_complete=False) as tx:
                for scope_ref, record_ids in missing.items():
                    for record_id, sealed in sealed_bodies(tx, scope_ref, record_ids):
                        body = self._open_body(scope_ref, record_id, sealed)
                        if body is not None:
                            opened[(scope_ref, record_id)] = body
        prepared: list[Prepared] = []
        for (scope_ref, _), pending in batch:
            if pending.text is not None:
                prepared.append((pending.text, pending.citation_keys or ()))
                continue
            body = opened.get((scope_ref, pending.record_id))
            if body is None:
                prepared.append(None)
                continue
            term_key = keyed_term_hasher(self._scope_key(scope_ref))
            prepared.append((record_text(body), citation_keys(body, term_key)))
        return prepared

    def keep(self, embedded: Sequence[Embedded]) -> None:
        """Write `embedded` into the store, one transaction; a failure is logged, never
        raised (the vectors serve from memory and are embedded again at the next start)."""
        if not embedded:
            return
        by_scope: defaultdict[str, list[tuple[str, bytes, str]]] = defaultdict(list)
        for item in embedded:
            sealed = self._sealer(item.scope_ref).seal(item.record_id, item.vector)
            by_scope[item.scope_ref].append((item.record_id, sealed, " ".join(item.citation_keys)))
        try:
            with self._database.transaction() as tx:
                for scope_ref, rows in by_scope.items():
                    keep_vectors(tx, scope_ref, self._model.model_ref, rows)
        except (StoreUnavailable, StoreCorrupt, CommitOutcomeUnknown):
            log.warning(
                "semantic index: %d vector(s) not kept; embedded again at the next start",
                len(embedded),
            )
