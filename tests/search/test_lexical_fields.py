"""Lexical fields and term statistics of a payload (SPEC §10.1), plain and blind-indexed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram_memory.search.fields import (
    FIELD_NAMES,
    FIELD_WEIGHTS,
    DocumentTerms,
    FieldTerms,
    document_fields,
    document_terms,
    field_terms,
    keyed_term_hasher,
    query_terms,
)

ASSETS = Path(__file__).parent.parent / "assets"


def _payload() -> dict[str, Any]:
    return {
        "primary_component_id": "c:main",
        "components": [
            {"component_id": "c:ctx", "kind": "context", "text": "Quarterly review"},
            {"component_id": "c:main", "kind": "decision", "text": "Adopt Postgres"},
            {"component_id": "c:ev", "kind": "evidence", "text": "Benchmark shows Postgres"},
            {"component_id": "c:more", "kind": "decision", "text": "Retire MySQL"},
        ],
        "citations": [
            {"citation_id": "k1", "source_ref": "doc:review-2024"},
            {"citation_id": "k2", "source_ref": "doc:bench"},
        ],
    }


def test_fields_follow_the_spec_construction() -> None:
    assert document_fields(_payload()) == {
        "primary": "Adopt Postgres",
        "decision": "Adopt Postgres\nRetire MySQL",
        "evidence": "Benchmark shows Postgres",
        "context": "Quarterly review",
        "citations": "doc:review-2024\ndoc:bench",
    }


def test_golden_payload_fields_come_from_its_single_component() -> None:
    payload = json.loads((ASSETS / "golden_payload_v2.json").read_text("utf-8"))
    fields = document_fields(payload)
    assert fields["primary"] == fields["decision"] == "Applied the documented correction."
    assert fields["evidence"] == fields["context"] == ""
    assert fields["citations"] == "source:case"


def test_field_weights_are_listed_in_spec_order() -> None:
    assert list(FIELD_WEIGHTS.items()) == [
        ("primary", 3.0),
        ("decision", 2.0),
        ("evidence", 1.5),
        ("context", 1.0),
        ("citations", 0.5),
    ]
    assert tuple(FIELD_WEIGHTS) == FIELD_NAMES


def test_document_terms_count_tokens_per_field() -> None:
    terms = document_terms(_payload())
    assert terms.fields["primary"] == FieldTerms({"adopt": 1, "postgres": 1}, 2)
    assert terms.fields["decision"] == FieldTerms(
        {"adopt": 1, "postgres": 1, "retire": 1, "mysql": 1}, 4
    )
    # "doc" twice, "review", "2024", "bench"; the newline separates sources.
    assert terms.fields["citations"] == FieldTerms(
        {"doc": 2, "review": 1, "2024": 1, "bench": 1}, 5
    )
    assert terms.contains("mysql")
    assert not terms.contains("oracle")


def test_field_length_counts_only_kept_tokens() -> None:
    assert field_terms("go to db now") == FieldTerms({"now": 1}, 1)


def test_keyed_terms_hide_plaintext_but_preserve_equality() -> None:
    hasher = keyed_term_hasher(b"\x01" * 32)
    terms = document_terms(_payload(), hasher)
    primary = terms.fields["primary"].counts
    assert all(len(term) == 64 and "postgres" not in term for term in primary)
    assert hasher("postgres") in primary
    assert terms.fields["evidence"].counts[hasher("postgres")] == 1
    assert keyed_term_hasher(b"\x02" * 32)("postgres") != hasher("postgres")


def test_keyed_terms_keep_field_lengths() -> None:
    plain = document_terms(_payload())
    keyed = document_terms(_payload(), keyed_term_hasher(b"k" * 32))
    for name in FIELD_NAMES:
        assert keyed.fields[name].length == plain.fields[name].length
        assert sorted(keyed.fields[name].counts.values()) == sorted(
            plain.fields[name].counts.values()
        )


def test_short_blind_index_key_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        keyed_term_hasher(b"short")


def test_query_terms_are_distinct_in_first_occurrence_order() -> None:
    assert query_terms("Beta alpha BETA db gamma alpha") == ["beta", "alpha", "gamma"]


def test_query_terms_are_keyed_like_documents() -> None:
    hasher = keyed_term_hasher(b"k" * 32)
    assert query_terms("Postgres postgres", hasher) == [hasher("postgres")]


def test_unresolvable_primary_component_is_refused() -> None:
    payload = _payload()
    payload["primary_component_id"] = "c:missing"
    with pytest.raises(ValueError, match="primary_component_id"):
        document_fields(payload)


def test_unknown_component_kind_is_refused() -> None:
    payload = _payload()
    payload["components"][0]["kind"] = "rumour"
    with pytest.raises(ValueError, match="kind"):
        document_fields(payload)


def test_term_counts_beyond_the_field_length_are_refused() -> None:
    with pytest.raises(ValueError, match="length"):
        FieldTerms({"alpha": 3}, 2)


def test_document_terms_must_cover_all_five_fields() -> None:
    with pytest.raises(ValueError, match="five"):
        DocumentTerms({"primary": FieldTerms({}, 0)})
