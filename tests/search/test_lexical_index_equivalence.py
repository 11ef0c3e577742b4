"""The index-fed ranking equals brute force bit for bit (SPEC §10.1 project decision).

Random corpora over a small vocabulary (so terms share documents and BM25 ties happen) are
ranked three ways: `rank` over all of E, `rank_from_statistics` over statistics plus the
postings of matching documents only, and an independent re-implementation written here
from the SPEC text. All floats must be identical, not merely close.
"""

from __future__ import annotations

import math
from dataclasses import astuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram_memory.search.fields import (
    FIELD_NAMES,
    DocumentTerms,
    FieldTerms,
    field_terms,
    keyed_term_hasher,
)
from engram_memory.search.ranking import (
    CorpusStatistics,
    RankDocument,
    Ranked,
    corpus_statistics,
    rank,
    rank_from_statistics,
)

NOW = 1_760_000_000_000
HALF_LIFE = 2_592_000_000
VOCABULARY = ["alpha", "beta", "gamma", "épée", "v2", "東京", "snake_case", "delta"]
WEIGHTS = (3.0, 2.0, 1.5, 1.0, 0.5)

Corpus = list[tuple[str, int | None, tuple[list[str], ...]]]

fields_strategy = st.tuples(
    *[st.lists(st.sampled_from(VOCABULARY), max_size=6) for _ in FIELD_NAMES]
)
corpus_strategy = st.lists(
    st.tuples(
        st.text(alphabet="abcxyz234", min_size=1, max_size=5),
        st.one_of(st.none(), st.integers(NOW - 4 * HALF_LIFE, NOW + 10)),
        fields_strategy,
    ),
    max_size=25,
    unique_by=lambda item: item[0],
)
query_strategy = st.lists(st.sampled_from([*VOCABULARY, "missing"]), max_size=6)

# A fixed, bounded profile: deterministic examples, no example database, fast enough for CI.
EQUIVALENCE = settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _documents(corpus: Corpus, term_key: object = None) -> list[RankDocument]:
    documents = []
    for suffix, t_end, fields in corpus:
        texts = {name: " ".join(tokens) for name, tokens in zip(FIELD_NAMES, fields, strict=True)}
        if term_key is None:
            terms = DocumentTerms({name: field_terms(texts[name]) for name in FIELD_NAMES})
        else:
            assert callable(term_key)
            terms = DocumentTerms(
                {name: field_terms(texts[name], term_key) for name in FIELD_NAMES}
            )
        documents.append(RankDocument("mem_" + suffix, terms, t_end))
    return documents


def _postings(documents: list[RankDocument], query: list[str]) -> list[RankDocument]:
    """What an index returns: matching documents, counts only for query terms, full lengths."""
    wanted = set(query)
    out = []
    for document in documents:
        if not any(document.terms.contains(term) for term in wanted):
            continue
        fields = {
            name: FieldTerms(
                {t: c for t, c in document.terms.fields[name].counts.items() if t in wanted},
                document.terms.fields[name].length,
            )
            for name in FIELD_NAMES
        }
        out.append(
            RankDocument(document.record_id, DocumentTerms(fields), document.valid_time_t_end)
        )
    return out


def _independent(corpus: Corpus, query: list[str]) -> list[tuple[str, float, float, float, float]]:
    """offline_lexical_v1 re-derived from the SPEC text on raw token lists."""
    n = len(corpus)
    terms = list(dict.fromkeys(query))
    avg = [(sum(len(f[i]) for _, _, f in corpus) / n if n else 0) or 1 for i in range(5)]
    df = {t: sum(1 for _, _, f in corpus if any(t in field for field in f)) for t in terms}
    bm25: dict[str, float] = {}
    for suffix, _, fields in corpus:
        score = 0.0
        for t in terms:
            if df[t] == 0:
                continue
            idf = max(0, math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)))
            if idf <= 0:
                continue
            inner = 0.0
            for i, field in enumerate(fields):
                tf = field.count(t)
                if tf:
                    norm = 1 - 0.75 + 0.75 * (len(field) / avg[i])
                    inner += WEIGHTS[i] * ((tf * (1.2 + 1)) / (tf + 1.2 * norm))
            score += idf * inner
        if score > 0:
            bm25["mem_" + suffix] = score
    t_ends = {"mem_" + suffix: t_end for suffix, t_end, _ in corpus}
    lexical = sorted(bm25, key=lambda rid: (-bm25[rid], rid.encode("utf-16-be")))[:2000]
    rows = []
    for position, rid in enumerate(lexical, start=1):
        t_end = t_ends[rid]
        anchor = NOW if t_end is None else min(NOW, t_end)
        fresh = math.exp((-math.log(2) * max(0, NOW - anchor)) / HALF_LIFE)
        lex = (1 / (60 + position)) / (1 / 61)
        rows.append((rid, 0.85 * lex + 0.15 * fresh, bm25[rid], lex, fresh))
    rows.sort(key=lambda row: (-row[1], -row[4], row[0].encode("utf-16-be")))
    return rows


def _tuples(ranked: list[Ranked]) -> list[tuple[str, float, float, float, float]]:
    return [astuple(item) for item in ranked]


@EQUIVALENCE
@given(corpus=corpus_strategy, query=query_strategy)
def test_statistics_ranking_equals_brute_force_bit_for_bit(
    corpus: Corpus, query: list[str]
) -> None:
    documents = _documents(corpus)
    brute = rank(documents, query, NOW)
    indexed = rank_from_statistics(
        corpus_statistics(documents, query), _postings(documents, query), query, NOW
    )
    assert _tuples(indexed) == _tuples(brute)


@EQUIVALENCE
@given(corpus=corpus_strategy, query=query_strategy)
def test_brute_force_equals_an_independent_derivation(corpus: Corpus, query: list[str]) -> None:
    assert _tuples(rank(_documents(corpus), query, NOW)) == _independent(corpus, query)


@EQUIVALENCE
@given(corpus=corpus_strategy, query=query_strategy)
def test_blind_index_ranks_exactly_like_plaintext(corpus: Corpus, query: list[str]) -> None:
    hasher = keyed_term_hasher(b"scope-key-" + b"\x00" * 22)
    keyed_query = list(dict.fromkeys(hasher(term) for term in query))
    keyed = _documents(corpus, hasher)
    indexed = rank_from_statistics(
        corpus_statistics(keyed, keyed_query), _postings(keyed, keyed_query), keyed_query, NOW
    )
    assert _tuples(indexed) == _tuples(rank(_documents(corpus), query, NOW))


def test_statistics_computed_by_an_index_match_corpus_statistics() -> None:
    corpus: Corpus = [
        ("a", None, (["alpha"], ["alpha", "beta"], [], [], ["v2"])),
        ("b", None, (["beta"], [], [], ["gamma", "gamma"], [])),
    ]
    stats = corpus_statistics(_documents(corpus), ["alpha", "gamma", "missing"])
    assert stats == CorpusStatistics(
        2,
        {"primary": 2, "decision": 2, "evidence": 0, "context": 2, "citations": 1},
        {"alpha": 1, "gamma": 1, "missing": 0},
    )
