"""The in-process index ranks exactly like brute-force `offline_lexical_v1` over E (SPEC §10).

Random corpora with random eligibility (states, accept and record cursors, valid windows,
expiry), random pinned pairs and random queries: the index's ranked list must equal
`ranking.rank` over the eligible set computed here from scratch, id for id and score bit for
bit, whichever way the index computes E's statistics (maintained aggregates corrected by the
exceptions, or every record evaluated), also after state changes and purges.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from engram_memory.search.fields import FIELD_NAMES, DocumentTerms, FieldTerms
from engram_memory.search.index_ranking import rank_in_index
from engram_memory.search.ranking import MAX_CANDIDATES, RankDocument, rank
from engram_memory.search.scope_index import ScopeIndex

VOCABULARY = [f"t{i}" for i in range(9)]


@dataclass
class Doc:
    record_id: str
    accept: int
    recorded: int
    valid_t: int
    valid_t_end: int | None
    expires: int | None
    state: str
    indexed: bool
    counts: dict[str, dict[str, int]]  # field -> term -> tf
    lengths: dict[str, int]

    def eligible(self, system_as_of: int, valid_as_of: int, now_ms: int) -> bool:
        return (
            self.state == "accepted_current"
            and self.indexed
            and self.accept <= system_as_of
            and self.recorded <= system_as_of
            and self.valid_t <= valid_as_of
            and (self.valid_t_end is None or valid_as_of <= self.valid_t_end)
            and (self.expires is None or now_ms < self.expires)
        )

    def rank_document(self) -> RankDocument:
        return RankDocument(
            self.record_id,
            DocumentTerms(
                {
                    name: FieldTerms(self.counts.get(name, {}), self.lengths[name])
                    for name in FIELD_NAMES
                }
            ),
            self.valid_t_end,
        )


def _record_id(rng: random.Random) -> str:
    return "mem_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(52))


def _corpus(rng: random.Random, size: int, *, bounded_share: float) -> list[Doc]:
    docs: list[Doc] = []
    cursor = 0
    for _ in range(size):
        cursor += rng.randint(1, 3)
        counts: dict[str, dict[str, int]] = {}
        lengths: dict[str, int] = {}
        for name in FIELD_NAMES:
            terms = rng.sample(VOCABULARY, rng.randint(0, 3))
            counts[name] = {term: rng.randint(1, 4) for term in terms}
            lengths[name] = sum(counts[name].values()) + rng.randint(0, 12)
        bounded = rng.random() < bounded_share
        valid_t = rng.randint(0, 100)
        ends = bounded and rng.random() < 0.6
        docs.append(
            Doc(
                record_id=_record_id(rng),
                accept=cursor,
                recorded=cursor - rng.randint(1, 2),
                valid_t=valid_t,
                valid_t_end=valid_t + rng.randint(0, 120) if ends else None,
                expires=rng.randint(50, 250) if bounded and rng.random() < 0.6 else None,
                state="accepted_current" if rng.random() < 0.85 else "historical",
                indexed=True,
                counts=counts,
                lengths=lengths,
            )
        )
    return docs


def _index_of(docs: list[Doc]) -> ScopeIndex:
    index = ScopeIndex()
    for doc in docs:
        index.admit(
            doc.record_id,
            accept_cursor=doc.accept,
            recorded_cursor=doc.recorded,
            valid_t=doc.valid_t,
            valid_t_end=doc.valid_t_end,
            expires_at_ms=doc.expires,
        )
        postings = [
            (term, name, tf) for name, terms in doc.counts.items() for term, tf in terms.items()
        ]
        index.add_document(doc.record_id, doc.lengths, postings)
        if doc.state != "accepted_current":
            index.set_state(doc.record_id, doc.state)
    return index


def _assert_same_ranking(
    index: ScopeIndex,
    docs: list[Doc],
    query: list[str],
    pinned: tuple[int, int, int],
    exception_share: float,
) -> None:
    system_as_of, valid_as_of, now_ms = pinned
    eligible = [d.rank_document() for d in docs if d.eligible(system_as_of, valid_as_of, now_ms)]
    expected = rank(eligible, query, valid_as_of)
    got = rank_in_index(
        index,
        list(dict.fromkeys(query)),
        system_as_of=system_as_of,
        valid_as_of=valid_as_of,
        now_ms=now_ms,
        exception_share=exception_share,
    )
    assert got.record_ids == [r.record_id for r in expected]
    assert [s.hex() for s in got.scores] == [r.score.hex() for r in expected]
    assert [b.hex() for b in got.bm25] == [r.bm25.hex() for r in expected]
    assert got.statistics.document_count == len(eligible)


def _pinned(rng: random.Random, docs: list[Doc]) -> tuple[int, int, int]:
    top = docs[-1].accept if docs else 1
    return rng.randint(0, top + 2), rng.randint(0, 200), rng.randint(0, 300)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("exception_share", [0.0, 1.0])
def test_index_ranking_equals_brute_force_over_the_eligible_set(
    seed: int, exception_share: float
) -> None:
    rng = random.Random(seed)
    docs = _corpus(rng, rng.randint(0, 80), bounded_share=rng.choice([0.0, 0.2, 0.9]))
    index = _index_of(docs)
    for _ in range(12):
        query = [rng.choice([*VOCABULARY, "absent"]) for _ in range(rng.randint(1, 4))]
        _assert_same_ranking(index, docs, query, _pinned(rng, docs), exception_share)


@pytest.mark.parametrize("seed", range(15))
def test_index_follows_state_changes_purges_and_compaction(seed: int) -> None:
    rng = random.Random(1000 + seed)
    docs = _corpus(rng, 60, bounded_share=0.3)
    index = _index_of(docs)
    for step in range(30):
        doc = rng.choice(docs)
        if rng.random() < 0.3 and doc.indexed:
            doc.indexed = False
            index.purge_document(doc.record_id)
        else:
            doc.state = rng.choice(["accepted_current", "accepted_disputed", "expired"])
            index.set_state(doc.record_id, doc.state)
        if step % 10 == 9:
            index.compact()
        query = [rng.choice(VOCABULARY) for _ in range(rng.randint(1, 3))]
        pinned = (docs[-1].accept, rng.randint(100, 200), rng.randint(0, 300))
        for share in (0.0, 1.0):
            _assert_same_ranking(index, docs, query, pinned, share)


def test_the_ranked_list_stops_at_the_cap_with_ties_broken_by_record_id() -> None:
    rng = random.Random(7)
    docs = _corpus(rng, MAX_CANDIDATES + 300, bounded_share=0.0)
    for doc in docs:  # identical documents: every bm25 ties, so ids decide the cut
        doc.counts = {name: {"t0": 1} for name in FIELD_NAMES}
        doc.lengths = dict.fromkeys(FIELD_NAMES, 3)
        doc.state = "accepted_current"
    index = _index_of(docs)
    pinned = (docs[-1].accept, 150, 10)
    _assert_same_ranking(index, docs, ["t0"], pinned, 1.0)
    got = rank_in_index(index, ["t0"], system_as_of=pinned[0], valid_as_of=150, now_ms=10)
    assert len(got.record_ids) == MAX_CANDIDATES
    assert got.record_ids == sorted(got.record_ids)
