"""The semantic projections of every scope (search/semantic_scope.py), moved by the same
committed changes as the lexical index and under its lock (core/search_index.py calls in here).

What a record contributes (its text and keyed citations, `record_semantics`, computed where
the lexical postings are) is handed over by the commit as a `RecordEmbedded` change; the
projection takes its citations at once and queues its text. The vectors are computed after
the commit, in batches, by an embedder thread (core/search_index.py), so embedding never
holds the writer and a bulk import's records are embedded a batch at a time; the tokenizer's
batch encode spreads a batch over the cores. A search waits until its scope has no queued
text, so it ranks with every vector of its snapshot (the position in its receipt).

Each vector the embedder computes is also kept in the store, sealed (core/kept_vectors.py,
migration 0011), and deleted with its record's tombstone: at open the projection is loaded
from the kept vectors instead of re-embedding every record. A record without a kept vector
(a store from before, another model, a row that does not open) is queued with no text: the
embedder opens its body after serving started, so opening never waits for it. Vectors are
held at the precision they are kept at (float16 values in a float32 matrix), so a loaded
projection equals a followed one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from engram_memory.contract.exceptions import KeyFileBroken, KeyStoreUnavailable, SealBroken
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore
from engram_memory.crypto.sealing import open_sealed
from engram_memory.crypto.vector_seal import at_stored_precision
from engram_memory.search.embedding import EmbeddingModel, Vectors, record_text
from engram_memory.search.fields import TermKey
from engram_memory.search.semantic_scope import SemanticScope
from engram_memory.store.index_changes import RecordEmbedded

# Records embedded per tokenizer call, at open and by the embedder (the tokenizer spreads a
# batch over the cores: batches embed ~2.5x faster than one text at a time on 2 cores).
EMBED_BATCH = 512

BodyOpener = Callable[[str, str, bytes], Mapping[str, Any] | None]


def citation_keys(record: Mapping[str, Any], term_key: TermKey) -> tuple[str, ...]:
    """Each citation's source document as a keyed hash: source_ref, locator scheme, value."""
    keys = []
    for citation in record.get("citations", []):
        if not isinstance(citation, Mapping):
            continue
        locator = citation.get("locator") or {}
        parts = (
            str(citation.get("source_ref", "")),
            str(locator.get("scheme", "")),
            str(locator.get("value", "")),
        )
        keys.append(term_key("citation\x00" + "\x00".join(parts)))
    return tuple(sorted(set(keys)))


def record_semantics(
    scope_ref: str, record: Mapping[str, Any], term_key: TermKey
) -> RecordEmbedded:
    """The change a record's accept transaction hands to the semantic projection (its text
    is embedded after the commit)."""
    return RecordEmbedded(
        scope_ref, str(record["record_id"]), record_text(record), citation_keys(record, term_key)
    )


@dataclass(eq=False)
class Pending:
    """A record waiting for its vector: its text and citations from its commit, or None for
    both when the embedder must open its body first (no kept vector at open)."""

    record_id: str
    text: str | None
    citation_keys: tuple[str, ...] | None


Queued = tuple[tuple[str, int], Pending]  # ((scope_ref, slot), what waits)
Prepared = tuple[str, tuple[str, ...]] | None  # (text, citation keys); None: no body opens


@dataclass(frozen=True)
class Embedded:
    """A vector the projection took, to be kept in the store."""

    scope_ref: str
    record_id: str
    vector: Vectors
    citation_keys: tuple[str, ...]


@dataclass
class SemanticProjection:
    """Every scope's `SemanticScope` and the records still to embed; its owner
    (`SearchIndex`) serializes every call."""

    model: EmbeddingModel
    scopes: dict[str, SemanticScope]
    # (scope_ref, slot) -> what waits, oldest first; a slot queued here has no vector.
    queued: dict[tuple[str, int], Pending] = field(default_factory=dict)

    def scope(self, scope_ref: str) -> SemanticScope:
        found = self.scopes.get(scope_ref)
        if found is None:
            found = self.scopes[scope_ref] = SemanticScope(self.model.dimensions)
        return found

    def embedded(self, change: RecordEmbedded, slot: int) -> None:
        """A committed record: its citations now, its text queued for the embedder."""
        self.scope(change.scope_ref).set_citations(slot, change.citation_keys)
        key = (change.scope_ref, slot)
        self.queued.pop(key, None)
        self.queued[key] = Pending(change.record_id, change.text, change.citation_keys)

    def load_scope(
        self,
        scope_ref: str,
        record_ids: Sequence[str],
        slots: Sequence[int],
        vectors: Vectors,
        citations: Sequence[tuple[str, ...]],
    ) -> None:
        """A scope's kept vectors at open (from the store or a kept index): `slots` get
        their vectors and citations, every other record of `record_ids` (by slot) is queued
        for the embedder, its body opened after serving started."""
        self.scope(scope_ref).load(slots, vectors, citations)
        has_vector = set(slots)
        for slot, record_id in enumerate(record_ids):
            if slot not in has_vector:
                self.unembedded(scope_ref, slot, record_id)

    def unembedded(self, scope_ref: str, slot: int, record_id: str) -> None:
        """An indexed record without a kept vector: its body is opened by the embedder."""
        self.queued[(scope_ref, slot)] = Pending(record_id, None, None)

    def purged(self, scope_ref: str, slot: int) -> None:
        self.queued.pop((scope_ref, slot), None)
        self.scope(scope_ref).remove(slot)

    def has_queued(self, scope_ref: str) -> bool:
        return any(queued_scope == scope_ref for queued_scope, _ in self.queued)

    def next_batch(self) -> list[Queued]:
        """The oldest queued records, at most `EMBED_BATCH` (they stay queued until stored)."""
        return list(islice(self.queued.items(), EMBED_BATCH))

    def store(
        self, batch: Sequence[Queued], prepared: Sequence[Prepared], vectors: Vectors
    ) -> list[Embedded]:
        """The vectors of `batch` (one per prepared entry that is not None, in order), for
        each record still queued as it was (a record purged or re-sent meanwhile keeps its
        newer state); returns what was taken, to keep."""
        taken: list[Embedded] = []
        rows = iter(at_stored_precision(vectors))
        for (key, pending), ready in zip(batch, prepared, strict=True):
            vector = None if ready is None else next(rows)
            if self.queued.get(key) is not pending:
                continue
            del self.queued[key]
            if ready is None or vector is None:
                continue  # no body opens: left out, as a record without a key always was
            scope = self.scope(key[0])
            if pending.citation_keys is None:
                scope.set_citations(key[1], ready[1])
            scope.set_vector(key[1], vector)
            taken.append(Embedded(key[0], pending.record_id, vector, ready[1]))
        return taken

    def vector_count(self, scope_ref: str) -> int:
        found = self.scopes.get(scope_ref)
        return 0 if found is None else found.vector_count()


def body_opener(keys: KeyStore, root_key: RootKey) -> BodyOpener:
    """Opens a record's sealed body with its item key; None when the key or body is gone."""

    def open_body(scope_ref: str, record_id: str, sealed: bytes) -> Mapping[str, Any] | None:
        try:
            data_key = keys.load_item_key(root_key, scope_ref, record_id)
            if data_key is None:
                return None
            body: Mapping[str, Any] = json.loads(
                open_sealed(data_key, sealed, scope_ref, record_id)
            )
        except (KeyFileBroken, KeyStoreUnavailable, SealBroken, ValueError):
            return None
        return body

    return open_body
