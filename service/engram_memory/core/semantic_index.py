"""The semantic projections of every scope (search/semantic_scope.py), moved by the same
committed changes as the lexical index and under its lock (core/search_index.py calls in here),
and rebuilt at open from the sealed bodies: vectors are derived from content, so they are
never written anywhere and exist in plaintext only in this process's memory.

What a record contributes (its text and keyed citations, `record_semantics`, computed where
the lexical postings are) is handed over by the commit as a `RecordEmbedded` change; the
projection takes its citations at once and queues its text. The vectors are computed after
the commit, in batches, by an embedder thread (core/search_index.py), so embedding never
holds the writer and a bulk import's records are embedded a batch at a time; the tokenizer's
batch encode spreads a batch over the cores. A search waits until its scope has no queued
text, so it ranks with every vector of its snapshot (the position in its receipt).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from engram_memory.contract.exceptions import KeyFileBroken, KeyStoreUnavailable, SealBroken
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore
from engram_memory.crypto.sealing import open_sealed
from engram_memory.search.embedding import EmbeddingModel, Vectors, record_text
from engram_memory.search.fields import TermKey, keyed_term_hasher
from engram_memory.search.scope_index import ScopeIndex
from engram_memory.search.semantic_scope import SemanticScope
from engram_memory.store.connection import load_queries
from engram_memory.store.index_changes import RecordEmbedded
from engram_memory.store.transaction import Transaction

log = logging.getLogger("engram_memory.semantic_index")

_Q = load_queries("engram_memory.store.sql", "search_index.sql")

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


QueuedText = tuple[tuple[str, int], str]  # ((scope_ref, slot), text)


@dataclass
class SemanticProjection:
    """Every scope's `SemanticScope` and the texts still to embed; its owner (`SearchIndex`)
    serializes every call."""

    model: EmbeddingModel
    scopes: dict[str, SemanticScope]
    # (scope_ref, slot) -> text, oldest first; a slot with a queued text has no vector.
    queued: dict[tuple[str, int], str] = field(default_factory=dict)

    def scope(self, scope_ref: str) -> SemanticScope:
        found = self.scopes.get(scope_ref)
        if found is None:
            found = self.scopes[scope_ref] = SemanticScope(self.model.dimensions)
        return found

    def embedded(self, change: RecordEmbedded, slot: int) -> None:
        """A committed record: its citations now, its text queued for the embedder."""
        self.scope(change.scope_ref).set_citations(slot, change.citation_keys)
        self.queued.pop((change.scope_ref, slot), None)
        self.queued[(change.scope_ref, slot)] = change.text

    def purged(self, scope_ref: str, slot: int) -> None:
        self.queued.pop((scope_ref, slot), None)
        self.scope(scope_ref).remove(slot)

    def has_queued(self, scope_ref: str) -> bool:
        return any(queued_scope == scope_ref for queued_scope, _ in self.queued)

    def next_batch(self) -> list[QueuedText]:
        """The oldest queued texts, at most `EMBED_BATCH` (they stay queued until stored)."""
        return list(islice(self.queued.items(), EMBED_BATCH))

    def store(self, batch: Sequence[QueuedText], vectors: Vectors) -> None:
        """The vectors of `batch`, for each text still queued as it was (a record purged or
        re-sent meanwhile keeps its newer state)."""
        for (key, text), vector in zip(batch, vectors, strict=True):
            if self.queued.get(key) is text:
                del self.queued[key]
                self.scope(key[0]).set_vector(key[1], vector)

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


def load_projection(
    tx: Transaction,
    model: EmbeddingModel,
    lexical: Mapping[str, ScopeIndex],
    open_body: BodyOpener,
    scope_key: Callable[[str], bytes],
) -> SemanticProjection:
    """Re-embed every indexed record with a body, scope by scope, in batches (at open)."""
    projection = SemanticProjection(model, {})
    unopened = 0
    for scope_ref, index in lexical.items():
        term_key = keyed_term_hasher(scope_key(scope_ref))
        rows = tx.fetchall(_Q["semantic_bodies"], [scope_ref])
        for start in range(0, len(rows), EMBED_BATCH):
            records: list[tuple[str, Mapping[str, Any]]] = []
            for record_id, sealed in rows[start : start + EMBED_BATCH]:
                body = open_body(scope_ref, str(record_id), bytes(sealed))
                if body is None:
                    unopened += 1
                    continue
                records.append((str(record_id), body))
            _add_batch(projection, scope_ref, index, records, term_key)
    if unopened:
        log.warning("semantic index: %d record(s) without an openable body left out", unopened)
    return projection


def _add_batch(
    projection: SemanticProjection,
    scope_ref: str,
    index: ScopeIndex,
    records: Iterable[tuple[str, Mapping[str, Any]]],
    term_key: TermKey,
) -> None:
    listed = list(records)
    vectors: Vectors = projection.model.embed([record_text(body) for _, body in listed])
    scope = projection.scope(scope_ref)
    for (record_id, body), vector in zip(listed, vectors, strict=True):
        scope.add(index.slot_of(record_id), vector, citation_keys(body, term_key))
