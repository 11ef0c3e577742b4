"""The search index kept across a clean stop, so that the next start need not read it out of
the store (issue 20 item 8: at 100k records that read is ~5 CPU-s, the kept index ~1).

At a clean stop the index (every scope's lexical columns and postings, and the semantic
vectors with their citations) is written as one payload, sealed with AES-256-GCM under a key
from the root key ring (crypto/sealed_chunks.py) and bound to a fingerprint of the rows it
was built from (core/index_reading.py: per scope, the count and hash sum of the indexed
records with their documents, and of the postings; sealed inside the payload) and to the
embedding model (bound as associated data). The next writable open takes the file away
(store/kept_index.py); the index load uses it only if it opens under that key and model and
its fingerprint equals the store's as the load's snapshot sees it (computed by DuckDB while
this process opens the payload). Anything else (another store, a change since, another
model, a flipped byte) and the index loads from the store, as without it, after one log
line.

Why the vectors may sit in this file: in the store they are sealed under a scope key from
the same stable index root, not under the items' keys, and deleted with the record; here
they are sealed under a key of that root too, the file holds only records that were live at
the stop, and it is removed by the next writable open before anything can be forgotten.

The payload's slots are numbered as a load from the store numbers them (indexed records by
accept cursor, then id), so an index from either source holds the same arrays.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from engram_memory.contract.exceptions import IndexInconsistent
from engram_memory.core.semantic_index import SemanticProjection
from engram_memory.crypto.sealed_chunks import open_sealed, seal
from engram_memory.search.columns import SLOT_SHIFT
from engram_memory.search.embedding import EmbeddingModel
from engram_memory.search.scope_index import ScopeIndex
from engram_memory.search.semantic_scope import SemanticScope

FORMAT = 1
_LOW_BITS = (1 << SLOT_SHIFT) - 1
_COLUMNS = ("current", "accept", "recorded", "valid_t", "valid_end", "expires", "lengths")

Built = tuple[dict[str, ScopeIndex], SemanticProjection | None]
Fingerprint = Sequence[tuple[str, str, int, str]]


def _binding(model: EmbeddingModel | None) -> bytes:
    """The associated data a kept index is sealed with: the format and the model."""
    document = {"format": FORMAT, "model": None if model is None else model.model_ref}
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).digest()


def _rows(fingerprint: Fingerprint) -> list[list[Any]]:
    return [list(row) for row in fingerprint]


def sealed_index(
    scopes: Mapping[str, ScopeIndex],
    semantic: SemanticProjection | None,
    key: bytes,
    fingerprint: Fingerprint,
    model: EmbeddingModel | None,
) -> bytes:
    """The sealed payload of `scopes` and `semantic` (under the index's lock), bound to the
    store's `fingerprint` and the `model`. The index must hold as many documents and postings
    per scope as the fingerprint counts: an index that missed a writer is never kept.

    Raises:
        IndexInconsistent: it holds what the payload cannot carry (a term or a citation key
            with a separator in it, an array of objects): the index is simply not kept.
    """
    arrays: dict[str, npt.NDArray[Any]] = {}
    held: dict[tuple[str, str], int] = {}
    scope_refs = sorted(scopes)
    for number, scope_ref in enumerate(scope_refs):
        vectors = None
        if semantic is not None:  # a scope with no vector yet still says so: none
            vectors = semantic.scopes.get(scope_ref) or SemanticScope(semantic.model.dimensions)
        prefix = f"{number}."
        _export_scope(arrays, prefix, scopes[scope_ref], vectors)
        held[("documents", scope_ref)] = len(arrays[prefix + "ids"])
        held[("postings", scope_ref)] = len(arrays[prefix + "packed"])
    counted = {(part, scope_ref): n for part, scope_ref, n, _ in fingerprint}
    if {k: n for k, n in held.items() if n} != {k: n for k, n in counted.items() if n}:
        raise IndexInconsistent("the index does not hold what the store counts: not kept")
    manifest = {
        "format": FORMAT,
        "scopes": scope_refs,
        "semantic": semantic is not None,
        "store": _rows(fingerprint),
    }
    return seal(key, _binding(model), _packed(manifest, arrays))


def opened_index(
    blob: bytes,
    key: bytes,
    model: EmbeddingModel | None,
    fingerprint: Callable[[], Fingerprint],
) -> Built | None:
    """The index `blob` holds, or None when it does not open under `key` and `model`, is
    not this format, or was kept from a store whose fingerprint is not `fingerprint()`
    (called once the payload is built: a caller may compute it meanwhile)."""
    payload = open_sealed(key, _binding(model), blob)
    if payload is None:
        return None
    try:
        manifest, arrays = _unpacked(payload)
        if manifest.get("format") != FORMAT:
            return None
        built = _built(manifest, arrays, model)
    except (ValueError, KeyError, TypeError, IndexError, IndexInconsistent):
        return None  # sealed by us, so only another version's layout gets here
    return built if manifest.get("store") == _rows(fingerprint()) else None


def _built(
    manifest: Mapping[str, Any],
    arrays: Mapping[str, npt.NDArray[Any]],
    model: EmbeddingModel | None,
) -> Built:
    scopes: dict[str, ScopeIndex] = {}
    semantic = None if model is None else SemanticProjection(model, {})
    for number, scope_ref in enumerate(manifest["scopes"]):
        prefix = f"{number}."
        scope = scopes[scope_ref] = _import_scope(arrays, prefix)
        if semantic is None:
            continue
        slots: list[int] = []  # kept without a model: every record is embedded again
        vectors: npt.NDArray[Any] = np.zeros((0, semantic.model.dimensions), dtype=np.float32)
        citations: list[tuple[str, ...]] = []
        if manifest["semantic"]:
            slots = arrays[prefix + "vector_slots"].tolist()
            vectors = arrays[prefix + "vectors"]
            lines = _untext(arrays[prefix + "citations"]).split("\n")
            citations = [tuple(line.split()) for line in lines][: len(slots)]
        semantic.load_scope(scope_ref, scope.record_ids, slots, vectors, citations)
    return scopes, semantic


def _export_scope(
    arrays: dict[str, npt.NDArray[Any]],
    prefix: str,
    scope: ScopeIndex,
    vectors: SemanticScope | None,
) -> None:
    columns = scope.slot_columns()
    indexed = np.flatnonzero(columns.indexed)
    order = indexed[np.lexsort((columns.ids[indexed], columns.accept[indexed]))]
    renumbered = np.full(len(columns.ids), -1, dtype=np.int64)
    renumbered[order] = np.arange(len(order), dtype=np.int64)
    arrays[prefix + "ids"] = columns.ids[order]
    for name in _COLUMNS:
        arrays[prefix + name] = getattr(columns, name)[order]
    terms = sorted(scope.postings)
    columns_of_terms = [np.array(scope.postings[term], dtype=np.int64) for term in terms]
    packed = np.concatenate(columns_of_terms or [np.zeros(0, dtype=np.int64)])
    counts = np.array([len(column) for column in columns_of_terms], dtype=np.int64)
    purged = len(order) != len(columns.ids)
    in_slot_order = bool(np.all(order[1:] > order[:-1]))
    if purged:  # purged documents' postings dropped
        ends = np.cumsum(counts, dtype=np.int64)
        live = columns.indexed[packed >> SLOT_SHIFT]
        live_before = np.concatenate(([0], np.cumsum(live, dtype=np.int64)))
        counts = live_before[ends] - live_before[ends - counts]
        packed = packed[live]
    if purged or not in_slot_order:  # slots numbered as a load from the store numbers them
        packed = (renumbered[packed >> SLOT_SHIFT] << SLOT_SHIFT) | (packed & _LOW_BITS)
    if not in_slot_order:
        # Accepts out of slot order: each term's postings sorted by (slot, field) again, as
        # a load from the store has them (dropping purged slots alone keeps the order).
        ranks = np.repeat(np.arange(len(terms), dtype=np.int64), counts)
        packed = packed[np.lexsort((packed, ranks))]
    terms_text = "\n".join(terms)
    if terms_text.count("\n") != max(len(terms) - 1, 0):
        raise IndexInconsistent("a term holds a line break: not kept")
    arrays[prefix + "terms"] = _text(terms_text)
    arrays[prefix + "term_counts"] = np.asarray(counts, dtype=np.int64)
    arrays[prefix + "packed"] = packed
    if vectors is not None:
        slots, held, citations = vectors.held(len(columns.ids))
        kept = renumbered[slots] >= 0
        new_slots = renumbered[slots[kept]]
        by_slot = np.argsort(new_slots, kind="stable")
        cited = [citations[i] for i in np.flatnonzero(kept)[by_slot]]
        text = "\n".join(" ".join(keys) for keys in cited)
        if text.count("\n") != max(len(cited) - 1, 0) or len(text.split()) != sum(
            len(keys) for keys in cited
        ):
            raise IndexInconsistent("a citation key holds a separator: not kept")
        arrays[prefix + "vector_slots"] = new_slots[by_slot]
        arrays[prefix + "vectors"] = held[kept][by_slot]
        arrays[prefix + "citations"] = _text(text)


def _import_scope(arrays: Mapping[str, npt.NDArray[Any]], prefix: str) -> ScopeIndex:
    terms_text = _untext(arrays[prefix + "terms"])
    terms = terms_text.split("\n") if terms_text else []
    counts = arrays[prefix + "term_counts"]
    scope = ScopeIndex()
    scope.bulk_load(
        [bytes(record_id).decode("ascii") for record_id in arrays[prefix + "ids"]],
        current=arrays[prefix + "current"],
        accept=arrays[prefix + "accept"],
        recorded=arrays[prefix + "recorded"],
        valid_t=arrays[prefix + "valid_t"],
        valid_end=arrays[prefix + "valid_end"],
        expires=arrays[prefix + "expires"],
        lengths=arrays[prefix + "lengths"],
        terms=terms,
        term_ranks=np.repeat(np.arange(len(terms), dtype=np.int64), counts),
        packed=arrays[prefix + "packed"],
    )
    return scope


# The payload: its header's length (4 bytes), the header (JSON: the manifest, and each
# array's dtype, shape and byte offset), then the arrays' bytes. Only these dtypes are read.
_DTYPES = {"int64": np.int64, "bool": np.bool_, "float32": np.float32, "uint8": np.uint8}


def _packed(manifest: dict[str, Any], arrays: Mapping[str, npt.NDArray[Any]]) -> bytes:
    layout: dict[str, Any] = {}
    parts: list[Any] = []
    offset = 0
    for name, array in arrays.items():
        contiguous = np.ascontiguousarray(array)
        if contiguous.dtype.kind not in "Sbiuf":
            raise IndexInconsistent(f"array {name} cannot be kept")
        dtype = contiguous.dtype.str if contiguous.dtype.kind == "S" else contiguous.dtype.name
        layout[name] = [dtype, list(contiguous.shape), offset]
        parts.append(contiguous.data)
        offset += contiguous.nbytes
    header = json.dumps({"manifest": manifest, "arrays": layout}).encode()
    return b"".join([struct.pack(">I", len(header)), header, *parts])


def _unpacked(payload: bytes) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
    """Raises: ValueError / KeyError / TypeError: not a payload of this layout."""
    (length,) = struct.unpack(">I", payload[:4])
    header = json.loads(payload[4 : 4 + length])
    base = 4 + length
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name, (dtype_name, shape, offset) in header["arrays"].items():
        dtype = np.dtype(dtype_name if dtype_name.startswith("|S") else _DTYPES[dtype_name])
        count = int(np.prod(shape)) if shape else 1
        array = np.frombuffer(payload, dtype=dtype, count=count, offset=base + int(offset))
        arrays[name] = array.reshape(shape)
    manifest: dict[str, Any] = header["manifest"]
    return manifest, arrays


def _text(text: str) -> npt.NDArray[np.uint8]:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def _untext(array: npt.NDArray[Any]) -> str:
    return bytes(array.tobytes()).decode("utf-8")
