"""The shipped semantic model (search/embedding.py): loads from package data, embeds
deterministically, and is refused with a reason, never a crash, when the extra or a file is
missing or a file does not match its manifest."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from engram_memory.search import embedding
from engram_memory.search.embedding import (
    MODEL_DIR,
    EmbeddingModel,
    Unavailable,
    load_embedding_model,
    record_text,
)


def test_the_shipped_model_embeds_unit_vectors_and_the_zero_vector_for_nothing() -> None:
    model = load_embedding_model()
    assert isinstance(model, EmbeddingModel)
    vectors = model.embed(["refund requested", "refund requested", "", "🙂"])
    assert vectors.shape == (4, model.dimensions)
    assert np.array_equal(vectors[0], vectors[1])
    assert np.linalg.norm(vectors[0]) == pytest.approx(1.0, abs=1e-5)
    assert not vectors[2].any()  # no token: matches nothing


def test_a_paraphrase_is_closer_than_an_unrelated_text() -> None:
    model = load_embedding_model()
    assert isinstance(model, EmbeddingModel)
    parcel, broken, outage = model.embed(
        [
            "the parcel was damaged in transit",
            "shipment arrived broken",
            "database outage overnight",
        ]
    )
    assert float(parcel @ broken) > float(parcel @ outage)


def test_a_record_is_embedded_from_its_primary_text_then_the_others_in_order() -> None:
    record = {
        "primary_component_id": "component:b",
        "components": [
            {"component_id": "component:a", "text": "first"},
            {"component_id": "component:b", "text": "primary"},
            {"component_id": "component:c", "text": "third"},
        ],
    }
    assert record_text(record) == "primary\nfirst\nthird"


def test_without_the_extra_the_model_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> object:
        raise ImportError(name)

    monkeypatch.setattr(embedding, "import_module", missing)
    result = load_embedding_model()
    assert isinstance(result, Unavailable)
    assert "[semantic]" in result.reason


@pytest.mark.parametrize("damage", ["missing_table", "missing_tokenizer", "tampered_table"])
def test_a_missing_or_altered_model_file_is_unavailable(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "model"
    shutil.copytree(MODEL_DIR, directory)
    if damage == "missing_table":
        (directory / embedding.TABLE_FILE).unlink()
    elif damage == "missing_tokenizer":
        (directory / embedding.TOKENIZER_FILE).unlink()
    else:
        table = bytearray((directory / embedding.TABLE_FILE).read_bytes())
        table[-1] ^= 0x01
        (directory / embedding.TABLE_FILE).write_bytes(bytes(table))
    assert isinstance(load_embedding_model(directory), Unavailable)
    assert isinstance(load_embedding_model(MODEL_DIR), EmbeddingModel)  # the shipped one is intact
