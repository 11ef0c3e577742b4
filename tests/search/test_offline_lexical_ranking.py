"""offline_lexical_v1 scoring, fusion, recency and ordering (SPEC §10.1)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from engram_memory.contract.digests import domain_digest
from engram_memory.search.fields import FIELD_NAMES, DocumentTerms, field_terms
from engram_memory.search.ranking import (
    HALF_LIFE_MS,
    MAX_CANDIDATES,
    PROFILE_CONSTANTS,
    CorpusStatistics,
    RankDocument,
    inverse_document_frequency,
    profile_config_digest,
    rank,
    rank_from_statistics,
    recency,
)
from engram_memory.search.tokenizer import tokenize

NOW = 1_760_000_000_000
WEIGHTS = {"primary": 3.0, "decision": 2.0, "evidence": 1.5, "context": 1.0, "citations": 0.5}


def doc_from(record_id: str, texts: Mapping[str, str], t_end: int | None = None) -> RankDocument:
    terms = DocumentTerms({name: field_terms(texts.get(name, "")) for name in FIELD_NAMES})
    return RankDocument(record_id, terms, t_end)


def doc(record_id: str, *, t_end: int | None = None, **texts: str) -> RankDocument:
    return doc_from(record_id, texts, t_end)


def straightforward_bm25(corpus: dict[str, dict[str, str]], query: str) -> dict[str, float]:
    """BM25F written out from the SPEC text on token lists, sharing no code with the module."""
    tokens = {
        rid: {f: tokenize(fields.get(f, "")) for f in WEIGHTS} for rid, fields in corpus.items()
    }
    n = len(tokens)
    avg = {f: (sum(len(d[f]) for d in tokens.values()) / n) or 1 for f in WEIGHTS}
    out: dict[str, float] = {}
    for rid, fields in tokens.items():
        total = 0.0
        for term in dict.fromkeys(tokenize(query)):
            df = sum(1 for d in tokens.values() if any(term in d[f] for f in WEIGHTS))
            if df == 0:
                continue
            idf = max(0, math.log(1 + (n - df + 0.5) / (df + 0.5)))
            if idf <= 0:
                continue
            per_field = 0.0
            for f, weight in WEIGHTS.items():
                tf = fields[f].count(term)
                if tf > 0:
                    sat = (tf * (1.2 + 1)) / (
                        tf + 1.2 * (1 - 0.75 + 0.75 * (len(fields[f]) / avg[f]))
                    )
                    per_field += weight * sat
            total += idf * per_field
        out[rid] = total
    return out


def test_single_primary_match_scores_three_ln2_by_hand() -> None:
    # n = 2, df = 1: idf = ln(1 + 1.5/1.5) = ln 2; len = avglen = 1: sat = 2.2/2.2 = 1.
    ranked = rank([doc("mem_a", primary="alpha"), doc("mem_b", primary="gamma")], ["alpha"], NOW)
    assert [r.record_id for r in ranked] == ["mem_a"]
    assert ranked[0].bm25 == pytest.approx(3 * math.log(2), rel=1e-15)
    assert (ranked[0].lexical, ranked[0].recency, ranked[0].score) == (1.0, 1.0, 1.0)


def test_bm25_matches_a_straightforward_formula_bit_for_bit() -> None:
    corpus = {
        "mem_a": {
            "primary": "alpha beta beta",
            "decision": "alpha beta beta gamma",
            "citations": "src:alpha",
        },
        "mem_b": {"primary": "beta", "evidence": "alpha alpha alpha delta", "context": "beta"},
        "mem_c": {"primary": "gamma delta", "context": "alpha epsilon epsilon epsilon epsilon"},
        "mem_d": {"primary": "omega"},
    }
    query = "beta Alpha beta zeta"
    expected = straightforward_bm25(corpus, query)
    ranked = rank(
        [doc_from(rid, fields) for rid, fields in corpus.items()], ["beta", "alpha", "zeta"], NOW
    )
    assert {r.record_id: r.bm25 for r in ranked} == {k: v for k, v in expected.items() if v > 0}
    assert [r.record_id for r in ranked] == sorted(
        (k for k, v in expected.items() if v > 0), key=lambda k: -expected[k]
    )


def test_documents_without_query_terms_are_not_candidates() -> None:
    ranked = rank([doc("mem_a", primary="alpha"), doc("mem_b", primary="beta")], ["beta"], NOW)
    assert [r.record_id for r in ranked] == ["mem_b"]


def test_query_without_kept_tokens_ranks_nothing() -> None:
    assert rank([doc("mem_a", primary="db is ok")], [], NOW) == []


def test_query_terms_absent_from_the_corpus_add_nothing() -> None:
    corpus = [doc("mem_a", primary="alpha"), doc("mem_b", primary="beta")]
    with_unknown = rank(corpus, ["zeta", "alpha", "omega"], NOW)
    assert with_unknown == rank(corpus, ["alpha"], NOW)


def test_empty_eligible_set_ranks_nothing() -> None:
    assert rank([], ["alpha"], NOW) == []


def test_equal_bm25_gets_distinct_rrf_positions_so_lower_record_id_scores_higher() -> None:
    ranked = rank([doc("mem_b", primary="alpha"), doc("mem_a", primary="alpha")], ["alpha"], NOW)
    assert [r.record_id for r in ranked] == ["mem_a", "mem_b"]
    assert ranked[0].bm25 == ranked[1].bm25
    assert ranked[0].lexical == 1.0
    assert ranked[1].lexical == (1 / 62) / (1 / 61)
    assert ranked[0].score > ranked[1].score


def test_record_id_ties_break_by_utf16_code_units() -> None:
    # U+FF01 sorts after the surrogate pair of U+1F600 in UTF-16, before it by code point.
    high, bmp = "mem_\U0001f600", "mem_\uff01"
    ranked = rank([doc(bmp, primary="alpha"), doc(high, primary="alpha")], ["alpha"], NOW)
    assert [r.record_id for r in ranked] == [high, bmp]


def test_open_valid_time_has_full_recency() -> None:
    assert recency(NOW, None) == 1.0


def test_valid_time_ending_after_valid_as_of_has_full_recency() -> None:
    assert recency(NOW, NOW + 1) == 1.0
    assert recency(NOW, NOW) == 1.0


def test_recency_halves_one_half_life_after_t_end() -> None:
    assert recency(NOW, NOW - HALF_LIFE_MS) == pytest.approx(0.5, rel=1e-15)
    assert recency(NOW, NOW - 2 * HALF_LIFE_MS) == pytest.approx(0.25, rel=1e-15)


def test_recency_reorders_candidates_but_never_creates_one() -> None:
    stale = doc("mem_a", t_end=NOW - 100 * HALF_LIFE_MS, primary="alpha alpha", decision="alpha")
    fresh = doc("mem_b", primary="alpha")
    unmatched = doc("mem_c", t_end=None, primary="beta")
    ranked = rank([stale, fresh, unmatched], ["alpha"], NOW)
    assert ranked[0].record_id == "mem_b"
    assert ranked[1].record_id == "mem_a"
    assert ranked[1].bm25 > ranked[0].bm25
    assert ranked[1].score == 0.85 * 1.0 + 0.15 * ranked[1].recency
    assert len(ranked) == 2


def test_idf_is_positive_for_any_real_document_frequency() -> None:
    assert inverse_document_frequency(3, 3) == math.log(1 + 0.5 / 3.5)
    assert inverse_document_frequency(3, 1) > inverse_document_frequency(3, 2) > 0


def test_idf_that_rounds_to_zero_adds_nothing() -> None:
    # With n = df = 2^52, (n − df + 0.5)/(df + 0.5) is below half an ulp of 1, so the log is 0.
    n = 2**52
    assert inverse_document_frequency(n, n) == 0.0
    stats = CorpusStatistics(n, dict.fromkeys(FIELD_NAMES, n), {"common": n, "rare": 1})
    postings = [doc("mem_a", primary="common"), doc("mem_b", primary="common rare")]
    ranked = rank_from_statistics(stats, postings, ["common", "rare"], NOW)
    assert [r.record_id for r in ranked] == ["mem_b"]
    alone = rank_from_statistics(stats, postings, ["rare"], NOW)
    assert ranked[0].bm25 == alone[0].bm25


def test_ranked_list_is_capped_at_2000_after_scoring_every_document() -> None:
    # The best document has the greatest record_id: a snapshot truncated by id before
    # scoring (the reference engine's behaviour) would never find it.
    corpus = [doc(f"mem_{i:05d}", primary="alpha beta") for i in range(MAX_CANDIDATES + 50)]
    corpus.append(doc("mem_zzzzz", primary="alpha"))
    ranked = rank(corpus, ["alpha"], NOW)
    assert len(ranked) == MAX_CANDIDATES
    assert ranked[0].record_id == "mem_zzzzz"
    assert ranked[-1].record_id == f"mem_{MAX_CANDIDATES - 2:05d}"
    assert ranked[-1].lexical == (1 / (60 + MAX_CANDIDATES)) / (1 / 61)


def test_duplicate_record_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        rank([doc("mem_a", primary="alpha"), doc("mem_a", primary="beta")], ["alpha"], NOW)


def test_statistics_inconsistent_with_postings_are_refused() -> None:
    stats = CorpusStatistics(1, dict.fromkeys(FIELD_NAMES, 5), {"alpha": 0})
    with pytest.raises(ValueError, match="frequency"):
        rank_from_statistics(stats, [doc("mem_a", primary="alpha")], ["alpha"], NOW)


def test_profile_config_digest_hashes_the_reference_configuration() -> None:
    expected = domain_digest(
        "graphify-memory/recall-profile-config/v1\0",
        {
            "profile": "offline_lexical_v1",
            "tokenizer_version": "graphify-memory:tokenizer:v1",
            "bm25": {"k1": 1.2, "b": 0.75},
            "field_weights": WEIGHTS,
            "rrf_k": 60,
            "max_lexical_variants": 8,
            "half_life_ms": 2_592_000_000,
            "weights": {"lexical": 0.85, "recency": 0.15},
        },
    )
    assert profile_config_digest() == expected
    assert profile_config_digest(PROFILE_CONSTANTS) == expected
