"""`offline_lexical_v1`: BM25F over five fields, single-list RRF, valid-time recency (SPEC §10.1).

Scores are IEEE-754 doubles evaluated in the reference engine's order: query terms in order
of first occurrence, fields in `FIELD_NAMES` order, each expression with the reference
engine's parenthesization. Python floats are doubles and `+ - * /` round identically, so
the same order gives the same bits; only `log`/`exp` depend on the platform's libm.

Two entry points produce identical results: `rank` evaluates the whole eligible set E by
brute force; `rank_from_statistics` takes corpus statistics and the postings of matching
documents only, which is what an index can supply without loading every document.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engram_memory.contract.canonical import JsonValue, normalize
from engram_memory.contract.digests import digest
from engram_memory.search.fields import FIELD_NAMES, FIELD_WEIGHTS, DocumentTerms
from engram_memory.search.tokenizer import TOKENIZER_VERSION

PROFILE = "offline_lexical_v1"
PROFILE_VERSION = "1.0.0"
SCORING_FORMULA_REF = "graphify-memory:offline-lexical-recency:v1"

BM25_K1 = 1.2
BM25_B = 0.75
RRF_K = 60
HALF_LIFE_MS = 2_592_000_000
LEXICAL_WEIGHT = 0.85
RECENCY_WEIGHT = 0.15
MAX_CANDIDATES = 2000
# Math.LN2, the correctly rounded double of ln 2 (equal to math.log(2) on IEEE platforms).
LN2 = 0.6931471805599453
# Reference-engine constant with no effect on offline scoring (one engine-generated lexical
# variant); kept because it is part of the hashed profile configuration.
MAX_LEXICAL_VARIANTS = 8

# The exact object the reference engine hashes as its offline profile configuration, so our
# `profile_config_digest` equals the reference engine's for the same profile.
PROFILE_CONSTANTS: dict[str, Any] = {
    "profile": PROFILE,
    "tokenizer_version": TOKENIZER_VERSION,
    "bm25": {"k1": BM25_K1, "b": BM25_B},
    "field_weights": dict(FIELD_WEIGHTS),
    "rrf_k": RRF_K,
    "max_lexical_variants": MAX_LEXICAL_VARIANTS,
    "half_life_ms": HALF_LIFE_MS,
    "weights": {"lexical": LEXICAL_WEIGHT, "recency": RECENCY_WEIGHT},
}


def profile_config_digest(constants: Mapping[str, JsonValue] | None = None) -> str:
    """`D("recall-profile-config", constants)` (SPEC §10.3); default: `PROFILE_CONSTANTS`.

    Raises:
        NonCanonicalValue: `constants` is not canonical JSON.
    """
    if constants is None:
        return _pinned_profile_digest()
    return digest("recall-profile-config", normalize(constants))


@functools.cache
def _pinned_profile_digest() -> str:
    """The pinned profile's digest, once per process: every search receipt carries it, and
    its small floats take the slow RFC 8785 encoder (issue 20)."""
    return digest("recall-profile-config", normalize(PROFILE_CONSTANTS))


@dataclass(frozen=True, slots=True)
class RankDocument:
    """One eligible document: id, per-field terms and its valid-time end (None = open)."""

    record_id: str
    terms: DocumentTerms
    valid_time_t_end: int | None


@dataclass(frozen=True, slots=True)
class Ranked:
    """One ranked candidate with every component of its score, for receipts and tests."""

    record_id: str
    score: float
    bm25: float
    lexical: float
    recency: float


@dataclass(frozen=True, slots=True)
class CorpusStatistics:
    """What an index must know about all of E: `n`, per-field token totals, `df` per term.

    `document_frequencies` needs at least the query terms; a missing term has `df = 0`.
    """

    document_count: int
    field_token_totals: Mapping[str, int]
    document_frequencies: Mapping[str, int]


def utf16_key(text: str) -> bytes:
    """Sort key ordering strings by UTF-16 code units, as ECMAScript `<` does.

    Big-endian UTF-16 bytes compare lexicographically exactly like their code units; Python
    compares code points, which differs above U+FFFF.
    """
    return text.encode("utf-16-be", "surrogatepass")


def inverse_document_frequency(n: int, df: int) -> float:
    """`idf(t) = max(0, ln(1 + (n − df + 0.5)/(df + 0.5)))`, evaluated as written.

    Raises:
        ValueError: `n` or `df` is negative.
    """
    if n < 0 or df < 0:
        raise ValueError("document counts must not be negative")
    return max(0.0, math.log(1 + (n - df + 0.5) / (df + 0.5)))


def recency(valid_as_of: int, valid_time_t_end: int | None) -> float:
    """Half-life decay from the end of the valid-time interval (open interval: no decay).

    Raises:
        Nothing for integer inputs.
    """
    anchor = valid_as_of if valid_time_t_end is None else min(valid_as_of, valid_time_t_end)
    age = max(0, valid_as_of - anchor)
    return math.exp((-LN2 * age) / HALF_LIFE_MS)


def average_lengths(n: int, totals: Mapping[str, int]) -> dict[str, float]:
    # "1 if 0": an empty field everywhere (or an empty E) must not divide by zero.
    return {name: (totals[name] / n if n > 0 else 0.0) or 1.0 for name in FIELD_NAMES}


def _idf_by_term(n: int, terms: Sequence[str], dfs: Mapping[str, int]) -> list[tuple[str, float]]:
    """Query terms that can contribute, with their idf, in query order."""
    weighted: list[tuple[str, float]] = []
    for term in terms:
        df = dfs.get(term, 0)
        if df == 0:
            continue
        idf = inverse_document_frequency(n, df)
        if idf <= 0:
            continue
        weighted.append((term, idf))
    return weighted


def _bm25(
    terms: DocumentTerms, weighted: Sequence[tuple[str, float]], avg: Mapping[str, float]
) -> float:
    score = 0.0
    for term, idf in weighted:
        field_score = 0.0
        for name in FIELD_NAMES:
            field = terms.fields[name]
            tf = field.counts.get(term, 0)
            if tf == 0:
                continue
            # Reference parenthesization: b·(len/avglen), not (b·len)/avglen; the two differ
            # in the last bit for about a quarter of inputs.
            norm = 1 - BM25_B + BM25_B * (field.length / avg[name])
            sat = (tf * (BM25_K1 + 1)) / (tf + BM25_K1 * norm)
            field_score += FIELD_WEIGHTS[name] * sat
        if field_score > 0:
            score += idf * field_score
    return score


def _fuse(scored: Iterable[tuple[RankDocument, float]], valid_as_of: int) -> list[Ranked]:
    """Lexical list, RRF normalization, recency and the final order (shared by both entries)."""
    lexical_list = sorted(scored, key=lambda item: (-item[1], utf16_key(item[0].record_id)))
    lexical_list = lexical_list[:MAX_CANDIDATES]
    if not lexical_list:
        return []
    # fused / max fused, as the reference computes it; 61/(60 + pos) is the same real number
    # but not always the same double.
    max_fused = 1 / (RRF_K + 1)
    ranked: list[Ranked] = []
    for index, (document, bm25) in enumerate(lexical_list):
        fused = 1 / (RRF_K + (index + 1))
        lexical = fused / max_fused
        fresh = recency(valid_as_of, document.valid_time_t_end)
        score = LEXICAL_WEIGHT * lexical + RECENCY_WEIGHT * fresh
        ranked.append(Ranked(document.record_id, score, bm25, lexical, fresh))
    ranked.sort(key=lambda item: (-item.score, -item.recency, utf16_key(item.record_id)))
    return ranked


def _distinct(terms: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(terms))


def _require_unique_ids(documents: Sequence[RankDocument]) -> None:
    if len({document.record_id for document in documents}) != len(documents):
        raise ValueError("record ids must be unique")


def corpus_statistics(documents: Sequence[RankDocument], terms: Iterable[str]) -> CorpusStatistics:
    """Compute `n`, per-field token totals and `df` of `terms` over the whole set.

    Raises:
        Nothing for well-formed documents.
    """
    totals = {name: sum(d.terms.fields[name].length for d in documents) for name in FIELD_NAMES}
    dfs = {term: sum(1 for d in documents if d.terms.contains(term)) for term in _distinct(terms)}
    return CorpusStatistics(len(documents), totals, dfs)


def rank(
    documents: Sequence[RankDocument], query_terms: Sequence[str], valid_as_of: int
) -> list[Ranked]:
    """Rank the eligible set E by brute force: every document is scored.

    `query_terms` are tokenized and keyed like the documents; duplicates are dropped keeping
    the first occurrence (Q of §10.1). Returns at most 2,000 candidates ordered by score
    desc, recency desc, record_id asc (UTF-16); documents with `bm25 = 0` never appear.

    Raises:
        ValueError: two documents share a record_id.
    """
    _require_unique_ids(documents)
    terms = _distinct(query_terms)
    n = len(documents)
    totals = dict.fromkeys(FIELD_NAMES, 0)
    for document in documents:
        for name in FIELD_NAMES:
            totals[name] += document.terms.fields[name].length
    dfs = {
        term: sum(1 for document in documents if document.terms.contains(term)) for term in terms
    }
    weighted = _idf_by_term(n, terms, dfs)
    avg = average_lengths(n, totals)
    scored = [(document, _bm25(document.terms, weighted, avg)) for document in documents]
    return _fuse(((document, bm25) for document, bm25 in scored if bm25 > 0), valid_as_of)


def _check_statistics(
    statistics: CorpusStatistics, postings: Sequence[RankDocument], terms: Sequence[str]
) -> None:
    n = statistics.document_count
    if n < len(postings) or set(statistics.field_token_totals) != set(FIELD_NAMES):
        raise ValueError("corpus statistics do not cover the postings")
    for name in FIELD_NAMES:
        if statistics.field_token_totals[name] < sum(p.terms.fields[name].length for p in postings):
            raise ValueError("field token totals are smaller than the postings' lengths")
    for term in terms:
        df = statistics.document_frequencies.get(term, 0)
        if not sum(1 for posting in postings if posting.terms.contains(term)) <= df <= n:
            raise ValueError("document frequency is inconsistent with the postings")


def rank_from_statistics(
    statistics: CorpusStatistics,
    postings: Sequence[RankDocument],
    query_terms: Sequence[str],
    valid_as_of: int,
) -> list[Ranked]:
    """Rank from index data: statistics over all of E plus the documents matching any term.

    `postings` need only the query terms in their counts, but each field `length` must be
    the document's full field length. Documents of E without any query term have
    `bm25 = 0` and are never candidates, so leaving them out changes nothing: the result
    equals `rank` over E bit for bit.

    Raises:
        ValueError: duplicate record ids, or statistics inconsistent with the postings
            (fewer documents or tokens than the postings hold, `df` outside
            [postings containing the term, n]).
    """
    _require_unique_ids(postings)
    terms = _distinct(query_terms)
    _check_statistics(statistics, postings, terms)
    n = statistics.document_count
    weighted = _idf_by_term(n, terms, statistics.document_frequencies)
    avg = average_lengths(n, statistics.field_token_totals)
    scored = ((posting, _bm25(posting.terms, weighted, avg)) for posting in postings)
    return _fuse(((posting, bm25) for posting, bm25 in scored if bm25 > 0), valid_as_of)
