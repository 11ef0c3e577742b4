"""The semantic channel end to end at the tool level (issue 21): real DuckDB file, real OPA
Wasm with the shipped bundle (acme permits `purpose:case-research` only), the shipped model.

- `lexical_and_semantic` answers with a semantic_v1 receipt where policy permits it, and
  RANKING_UNAVAILABLE (retriable) where it does not, or without the model;
- `lexical` takes semantic_v1 when permitted, else offline_lexical_v1; cursors pin it;
- the projections follow the commits exactly (followed == rebuilt from the store), and a
  rebuilt projection loads the kept vectors instead of re-embedding;
- a forgotten record's vector is gone from memory and from the store (its sealed row goes in
  the tombstone's transaction) and was never on disk in plaintext.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_memory.core.index_loading import semantic_keeping
from engram_memory.core.runtime import Services
from engram_memory.core.search_index import SearchIndex
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore
from engram_memory.tools.dispatch import MemoryService
from tests.harness import Caller, error_of, ok_value
from tests.rules.steps import files_holding
from tests.tools.semantic_support import PERMITTED, record, semantic_setup
from tests.tools.test_tool_rules import forget

SEARCH = "engram_memory_search"
CAPTURE = "engram_memory_capture"
SCOPE = "tenant:acme/workspace:support"


def _kept_vectors(services: Services) -> list[str]:
    """The record ids whose sealed vector the store keeps, once the embedder is idle."""
    index = services.search_index
    assert index is not None
    assert index.embedder_idle(60)
    with services.database.reading() as tx:
        rows = tx.fetchall("SELECT record_id FROM record_vectors ORDER BY record_id")
    return [str(row[0]) for row in rows]


def _search(caller: Caller, query: str, channels: str, **extra: Any) -> dict[str, Any]:
    return caller.call(
        SEARCH,
        {
            "query": query,
            "purpose_ref": caller.purpose_ref,
            "capability_policy": {"minimum_channels": channels, "network": "forbid"},
            **extra,
        },
    )


def test_a_permitted_purpose_gets_semantic_v1_and_finds_a_paraphrase(researcher: Caller) -> None:
    refund = record(researcher, "The customer asked for a refund of the order.")
    record(researcher, "Quarterly firewall audit scheduled for the data center.")
    assert (
        ok_value(_search(researcher, "give the client their money back", "lexical"))["records"]
        != []
    )  # semantic_v1 is taken by `lexical` too when permitted
    answer = ok_value(_search(researcher, "reimburse the buyer", "lexical_and_semantic"))
    receipt = answer["rank_receipt"]
    assert receipt["profile"] == "semantic_v1"
    assert receipt["scoring_formula_ref"] == "graphify-memory:semantic-rrf-recency:v1"
    assert len(receipt["projection_receipt_digests"]) == 3  # lexical, adjacency, vector
    assert refund in [packet["record"]["record_id"] for packet in answer["records"]]


def test_a_purpose_policy_does_not_permit_is_ranking_unavailable_never_lexical(
    semantic_services: Services,
) -> None:
    caller = Caller(MemoryService(semantic_services))  # purpose:support-case: not listed
    record(caller, "Refund approved for the damaged parcel.")
    assert error_of(_search(caller, "refund", "lexical_and_semantic")) == (
        "RANKING_UNAVAILABLE",
        True,
    )
    assert error_of(
        caller.call(
            SEARCH,
            {
                "query": "refund",
                "purpose_ref": caller.purpose_ref,
                "capability_policy": {
                    "minimum_channels": "lexical_and_semantic",
                    "network": "allow",
                },
            },
        )
    ) == ("RANKING_UNAVAILABLE", True)  # network "allow" grants nothing
    answer = ok_value(_search(caller, "refund", "lexical"))
    assert answer["rank_receipt"]["profile"] == "offline_lexical_v1"
    assert len(answer["records"]) == 1


def test_without_the_model_lexical_and_semantic_is_ranking_unavailable(alice: Caller) -> None:
    # The harness's services follow the store without a semantic setup (a missing extra).
    researcher = alice.as_(purpose_ref=PERMITTED)
    assert error_of(_search(researcher, "refund", "lexical_and_semantic")) == (
        "RANKING_UNAVAILABLE",
        True,
    )
    assert ok_value(_search(researcher, "refund", "lexical"))["rank_receipt"]["profile"] == (
        "offline_lexical_v1"
    )


def test_a_cursor_pins_semantic_v1_across_pages(researcher: Caller) -> None:
    for n in range(4):
        record(researcher, f"Refund note number {n} for a returned item.")
    first = ok_value(_search(researcher, "money back", "lexical", limit=2))
    assert first["rank_receipt"]["profile"] == "semantic_v1"
    second = ok_value(
        _search(researcher, "money back", "lexical", limit=2, page_cursor=first["next_page_cursor"])
    )
    assert second["rank_receipt"]["profile"] == "semantic_v1"
    assert second["records"][0]["rank"] == 3


def test_the_followed_projections_equal_ones_rebuilt_from_the_store(
    researcher: Caller, semantic_services: Services
) -> None:
    kept = [record(researcher, f"Parcel {n} arrived damaged; replacement sent.") for n in range(5)]
    ok_value(forget(researcher, kept[1]))
    index = semantic_services.search_index
    assert index is not None
    assert _kept_vectors(semantic_services) == sorted(set(kept) - {kept[1]})
    setup = semantic_setup(semantic_services.keys, semantic_services.root_key)
    rebuilt = SearchIndex(semantic_keeping(semantic_services.database, setup))
    with semantic_services.database.reading() as tx:
        rebuilt.load(tx)
    assert rebuilt.semantic is not None
    assert not rebuilt.semantic.queued  # loaded from the kept vectors, none re-embedded
    followed = index.semantic_rows()
    assert followed == rebuilt.semantic_rows()
    vectors, edges = followed[SCOPE]
    assert sorted(record_id for record_id, _ in vectors) == sorted(set(kept) - {kept[1]})
    assert len(edges) == 4 * 3  # the four live records share the demo's ticket citation


def test_a_record_without_a_kept_vector_is_embedded_after_the_load_and_then_kept(
    researcher: Caller, semantic_services: Services
) -> None:
    kept = sorted(
        record(researcher, f"Invoice {n} was paid twice; credit issued.") for n in range(3)
    )
    assert _kept_vectors(semantic_services) == kept
    with semantic_services.database.transaction() as tx:  # a store from before migration 0011
        tx.execute("DELETE FROM record_vectors")
    index = semantic_services.search_index
    assert index is not None
    setup = semantic_setup(semantic_services.keys, semantic_services.root_key)
    rebuilt = SearchIndex(semantic_keeping(semantic_services.database, setup))
    with semantic_services.database.reading() as tx:
        rebuilt.load(tx)
    assert rebuilt.semantic is not None
    assert len(rebuilt.semantic.queued) == 3  # nothing embedded before serving
    assert rebuilt.semantic_rows() == index.semantic_rows()
    assert rebuilt.embedder_idle(60)
    assert _kept_vectors(semantic_services) == kept


def test_a_forgotten_records_vector_is_gone_from_memory_and_the_store_and_never_in_plaintext(
    researcher: Caller, semantic_services: Services
) -> None:
    marker = f"marker{uuid.uuid4().hex[:12]}"
    record_id = record(researcher, f"Refund {marker} approved after the carrier lost it.")
    index = semantic_services.search_index
    assert index is not None
    vectors = dict(index.semantic_rows()[SCOPE][0])
    vector = np.array(vectors[record_id], dtype=np.float32)
    assert np.linalg.norm(vector) > 0
    needles = [
        vector.tobytes(),
        vector.astype(np.float64).tobytes(),
        vector.astype(np.float16).tobytes(),
    ]
    for needle in needles:
        assert files_holding(semantic_services, needle) == []
    assert record_id in _kept_vectors(semantic_services)  # sealed in the store

    ok_value(forget(researcher, record_id))
    assert record_id not in _kept_vectors(semantic_services)

    assert record_id not in dict(index.semantic_rows()[SCOPE][0])
    for needle in [*needles, marker.encode()]:
        assert files_holding(semantic_services, needle) == []
    answer = ok_value(_search(researcher, marker, "lexical_and_semantic"))
    assert record_id not in [packet["record"]["record_id"] for packet in answer["records"]]


def test_a_missing_model_is_one_start_up_line_and_no_semantic_channel(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    from engram_memory.core import opening
    from engram_memory.search.embedding import Unavailable

    monkeypatch.setattr(
        opening, "load_embedding_model", lambda: Unavailable("the semantic model files are missing")
    )
    with caplog.at_level(logging.INFO, logger="engram_memory.opening"):
        setup = opening._semantic_setup(KeyStore(tmp_path / "keys"), RootKey(os.urandom(32)))
    assert setup is None
    assert [r.levelno for r in caplog.records if r.name == "engram_memory.opening"] == [
        logging.INFO
    ]


def test_a_failing_embedder_fails_closed_without_content_in_the_log(
    researcher: Caller,
    semantic_services: Services,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    index = semantic_services.search_index
    assert index is not None
    assert index.semantic is not None
    model = index.semantic.model
    embed = model.embed

    def embed_or_fail_in_the_embedder(texts: Any) -> Any:
        if threading.current_thread().name == "engram-semantic-embedder":
            raise RuntimeError("tokenizer broke")
        return embed(texts)

    monkeypatch.setattr(model, "embed", embed_or_fail_in_the_embedder)
    marker = f"marker{uuid.uuid4().hex[:12]}"
    with caplog.at_level(logging.ERROR, logger="engram_memory.search_index"):
        record(researcher, f"Refund {marker} requested.")
        assert error_of(_search(researcher, marker, "lexical_and_semantic")) == (
            "RANKING_UNAVAILABLE",
            True,
        )
    logged = [r for r in caplog.records if r.name == "engram_memory.search_index"]
    assert [r.levelno for r in logged] == [logging.ERROR]
    assert all(marker not in r.getMessage() for r in caplog.records)
