"""The local embedding model of `semantic_v1`: a static token table distilled once from
all-MiniLM-L6-v2 (scripts/distill_semantic_model.py), shipped in `search/_model/`.

A text's vector is the mean of its tokens' rows, L2-normalized; a text with no known token
gets the zero vector (it matches nothing). The table and tokenizer are package data read from
this package's own directory: no code path here can reach a model hub. The tokenizer needs the
`tokenizers` package of the `[semantic]` extra; without it, or without a model file, loading
answers `Unavailable` with a reason fit for one start-up log line (never content).

Chunking rule (SPEC §10.2's vector projection): a record has one vector over its primary text
followed by every other component's text, in array order; a static table has no position
limit, so nothing is cut except beyond `MAX_RECORD_TOKENS` tokens, which bounds one record's
cost (a record that long is summarized by its first `MAX_RECORD_TOKENS` tokens).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]

MODEL_DIR = Path(__file__).resolve().parent / "_model"
TABLE_FILE = "token_vectors.npy"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"
MAX_RECORD_TOKENS = 8192


@dataclass(frozen=True)
class Unavailable:
    """Why the semantic channel cannot run (a fixed phrase, safe to log)."""

    reason: str


class EmbeddingModel:
    """Token table + tokenizer; `embed` is pure and thread-safe (the tokenizer is)."""

    def __init__(self, table: Vectors, tokenizer: Any, model_ref: str) -> None:
        self._table = table
        self._tokenizer = tokenizer
        self.model_ref = model_ref
        self.dimensions = int(table.shape[1])

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        # One text (a query) is encoded on the calling thread: a batch wakes the tokenizer's
        # thread pool, whose workers then spin on the cores the rest of the call needs.
        if len(texts) == 1:
            encodings = [self._tokenizer.encode(texts[0], add_special_tokens=False)]
        else:
            encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [list(encoding.ids[:MAX_RECORD_TOKENS]) for encoding in encodings]

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit (or zero) float32 vector per text, rows in the order of `texts`."""
        result = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, ids in enumerate(self.token_ids(texts)):
            if ids:
                mean = self._table[np.asarray(ids, dtype=np.int64)].mean(axis=0)
                norm = float(np.linalg.norm(mean))
                if norm > 0:
                    result[row] = mean / norm
        return result


def record_text(record: Mapping[str, Any]) -> str:
    """The text a record's vector is computed from: its primary component's text, then the
    other components' texts in array order, one per line."""
    components = [c for c in record.get("components", []) if isinstance(c, Mapping)]
    primary_id = record.get("primary_component_id")
    primary = [str(c.get("text", "")) for c in components if c.get("component_id") == primary_id]
    others = [str(c.get("text", "")) for c in components if c.get("component_id") != primary_id]
    return "\n".join(primary + others)


def load_embedding_model(directory: Path = MODEL_DIR) -> EmbeddingModel | Unavailable:
    """The shipped model, or why it cannot be used. Checks the table against the manifest's
    digest, so a damaged or swapped file is refused rather than ranking with it.

    Raises:
        Nothing: every failure is an `Unavailable`.
    """
    try:
        tokenizers = import_module("tokenizers")
    except ImportError:
        return Unavailable("the [semantic] extra is not installed (package tokenizers)")
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
        table_bytes = (directory / TABLE_FILE).read_bytes()
        tokenizer_bytes = (directory / TOKENIZER_FILE).read_bytes()
    except (OSError, ValueError):
        return Unavailable("the semantic model files are missing or unreadable")
    if hashlib.sha256(table_bytes).hexdigest() != manifest.get("table_sha256") or hashlib.sha256(
        tokenizer_bytes
    ).hexdigest() != manifest.get("tokenizer_sha256"):
        return Unavailable("the semantic model files do not match their manifest")
    try:
        table = np.load(directory / TABLE_FILE, allow_pickle=False).astype(np.float32)
        tokenizer = tokenizers.Tokenizer.from_str(tokenizer_bytes.decode("utf-8"))
    except (OSError, ValueError, Exception):  # noqa: BLE001 - the tokenizer's own error types
        return Unavailable("the semantic model files could not be loaded")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    if table.ndim != 2 or table.shape[0] != tokenizer.get_vocab_size():
        return Unavailable("the semantic model table does not fit its tokenizer")
    model_ref = f"engram-memory:minilm-l6-v2-static:{manifest['table_sha256'][:16]}"
    return EmbeddingModel(table, tokenizer, model_ref)
