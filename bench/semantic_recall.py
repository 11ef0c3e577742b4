"""Recall of `semantic_v1` against `offline_lexical_v1` on planted paraphrases, and its latency.

Usage: .venv/bin/python -m bench.semantic_recall [--sizes 1000,10000] [--repeat 3]
       [--rss-size 100000] [--stdio-sizes 1000] [--out DIR]

For each size, the seeded bench/corpus.py records are indexed in process exactly as the service
indexes them (search/scope_index.py, search/semantic_scope.py, the shipped model), with
`len(PLANTED)` of them replaced by real support-case sentences. Every planted record has two
queries with graded relevance (the planted record: grade 1, every other record: 0):

- a paraphrase query sharing no content word with it (checked below with the lexical
  tokenizer), which lexical search cannot find by construction;
- a keyword query made of words of the planted sentence.

Reported per size and query kind: recall@10 and nDCG@10 for `offline_lexical_v1` and
`semantic_v1` (the SPEC §10.2 formula as written), plus two diagnostics that are NOT product
profiles and explain where the formula loses recall: the vector list alone, and RRF over the
lexical and vector lists without the PageRank list. Latency: p50/p99 of one ranking in process
(query embedding included; the store and packet materialization excluded), and the embedding
throughput while indexing. Writes semantic_recall.{json,md,png} into --out (default
bench/results).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import semantic_costs, semantic_report
from bench.corpus import generate
from bench.report import RESULTS, machine, machine_load, percentile
from engram_memory.core.semantic_index import EMBED_BATCH, citation_keys
from engram_memory.search.embedding import EmbeddingModel, load_embedding_model, record_text
from engram_memory.search.fields import document_terms, identity_term, query_terms
from engram_memory.search.index_ranking import eligible_bm25, rank_in_index
from engram_memory.search.ranking import RRF_K, utf16_key
from engram_memory.search.scope_index import ScopeIndex
from engram_memory.search.semantic_ranking import (
    PPR_SCORE_DECIMALS,
    channel_order,
    id_ranks,
    personalized_pagerank,
)
from engram_memory.search.semantic_scope import SemanticScope, rank_with_projections
from engram_memory.search.tokenizer import tokenize

# (planted record text, paraphrase query with no shared content word, keyword query)
PLANTED: tuple[tuple[str, str, str], ...] = (
    (
        "Refund requested because the blender arrived with a cracked jar.",
        "customer wants money back for broken kitchen appliance",
        "blender cracked jar",
    ),
    (
        "The courier left the package at the wrong address twice this month.",
        "delivery driver dropped parcel at incorrect house repeatedly",
        "courier wrong address",
    ),
    (
        "Client cancelled the annual subscription after the price increase.",
        "buyer ended yearly membership when cost went up",
        "annual subscription cancelled",
    ),
    (
        "Password reset emails are not reaching users with corporate inboxes.",
        "login recovery messages fail to arrive for business mail accounts",
        "password reset emails",
    ),
    (
        "The invoice was charged twice on the credit card in March.",
        "duplicate billing on payment method this spring",
        "invoice charged twice",
    ),
    (
        "Laptop battery swells and overheats after the firmware update.",
        "notebook power cell bulges and gets hot following software patch",
        "laptop battery firmware",
    ),
    (
        "Warehouse staff mislabeled the pallets, so shipments went to Denver.",
        "storage workers tagged crates incorrectly sending goods to Colorado",
        "mislabeled pallets Denver",
    ),
    (
        "The mobile app crashes whenever photos are uploaded from the gallery.",
        "phone application quits when pictures are sent from camera roll",
        "app crashes photos uploaded",
    ),
    (
        "Customer complained that support never answered her phone calls.",
        "client angry that help desk ignored telephone contact",
        "support never answered calls",
    ),
    (
        "Agreed to extend the warranty by six months as a goodwill gesture.",
        "lengthened guarantee half a year to keep the client happy",
        "extend warranty goodwill",
    ),
    (
        "The coffee machine leaks water from the bottom tray.",
        "espresso maker drips liquid underneath",
        "coffee machine leaks",
    ),
    (
        "Shipping delays caused by the snowstorm in the northeast region.",
        "transport late due to blizzard in new england",
        "shipping delays snowstorm",
    ),
    (
        "User cannot log in because two-factor codes expire too quickly.",
        "account access blocked since authentication tokens time out fast",
        "two-factor codes expire",
    ),
    (
        "The hotel booking was lost, so the guest had no room on arrival.",
        "reservation vanished and the traveler found no lodging when checking in",
        "hotel booking lost",
    ),
    (
        "Replaced the defective headphones with a newer model at no cost.",
        "swapped faulty earphones for an updated version free of charge",
        "defective headphones replaced",
    ),
    (
        "The contract renewal was delayed while legal reviewed the liability clause.",
        "agreement extension postponed pending lawyers checking indemnity terms",
        "contract renewal liability clause",
    ),
    (
        "Printer jams on every page when using recycled paper.",
        "copier gets stuck on each sheet with reused stock",
        "printer jams recycled paper",
    ),
    (
        "The dog food order contained the wrong flavor for the third time.",
        "pet meal purchase had incorrect taste again",
        "dog food wrong flavor",
    ),
    (
        "Refunded the concert tickets after the show was postponed indefinitely.",
        "reimbursed event passes since the performance got delayed without a date",
        "concert tickets postponed",
    ),
    (
        "The thermostat shows the wrong temperature after installation.",
        "heating controller displays incorrect reading once fitted",
        "thermostat wrong temperature",
    ),
    (
        "A fraudulent purchase was made with a stolen gift card.",
        "scam transaction using a pilfered voucher",
        "fraudulent purchase gift card",
    ),
    (
        "Escalated the outage to engineering because the website was down for hours.",
        "raised the downtime with developers as the site was offline a long time",
        "website outage escalated",
    ),
    (
        "The sofa delivery arrived scratched and missing two legs.",
        "couch came damaged with absent feet",
        "sofa scratched missing legs",
    ),
    (
        "Customer asked to delete all personal data under privacy law.",
        "client requested erasure of private information per regulations",
        "delete personal data privacy",
    ),
)
# Function words a paraphrase may share with its record (they carry no content).
STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "was",
        "are",
        "not",
        "from",
        "that",
        "this",
        "when",
        "after",
        "since",
        "once",
        "per",
        "each",
        "own",
        "had",
        "has",
        "all",
        "any",
        "out",
        "too",
        "get",
        "got",
        "gets",
        "its",
        "her",
        "his",
        "their",
        "our",
        "was",
        "were",
        "been",
        "being",
    ]
)
VALID_AS_OF = 1_900_000_000_000
# Texts embedded one at a time (as each admission embedded before the follower batched).
SINGLE_TEXTS = 2000


def _check_paraphrases() -> None:
    for text, paraphrase, _ in PLANTED:
        shared = (set(tokenize(text)) & set(tokenize(paraphrase))) - STOPWORDS
        if shared:
            raise SystemExit(f"paraphrase shares content words {sorted(shared)}: {paraphrase!r}")


class Corpus:
    """One size's in-process index and projections, built as the service builds them (the
    semantic projection only with a model: `add_semantic` adds it later, for the RSS figure)."""

    def __init__(self, size: int, model: EmbeddingModel | None) -> None:
        self.lexical = ScopeIndex()
        stride = size // len(PLANTED)
        self.planted = {stride * n + stride // 2: n for n in range(len(PLANTED))}
        self.targets: dict[int, str] = {}
        self.texts: list[str] = []
        self.citations: list[tuple[str, ...]] = []
        for index, line in enumerate(generate(size)):
            payload = json.loads(line)["payload"]
            if index in self.planted:
                planted = self.planted[index]
                payload["components"] = [{**payload["components"][0], "text": PLANTED[planted][0]}]
                self.targets[planted] = f"mem_{index:09d}"
            record_id = f"mem_{index:09d}"
            terms = document_terms(payload, identity_term)
            self.lexical.admit(
                record_id,
                accept_cursor=index + 1,
                recorded_cursor=index + 1,
                valid_t=int(payload["valid_time"]["t"]),
                valid_t_end=None,
                expires_at_ms=None,
            )
            self.lexical.add_document(
                record_id,
                {name: field.length for name, field in terms.fields.items()},
                [
                    (term, name, count)
                    for name, field in terms.fields.items()
                    for term, count in field.counts.items()
                ],
            )
            self.texts.append(record_text(payload))
            self.citations.append(citation_keys(payload, identity_term))
        self.size = size
        self.overlap: list[float] = []  # share of the PPR top 60 that is the lexical top 60
        self.lexical_hits: list[int] = []
        self.embed_seconds = 0.0
        if model is not None:
            self.add_semantic(model)

    def add_semantic(self, model: EmbeddingModel) -> None:
        """Embed every record in batches of EMBED_BATCH, as the service's embedder does."""
        self.model = model
        self.semantic = SemanticScope(model.dimensions)
        started = time.perf_counter()
        vectors = np.zeros((self.size, model.dimensions), dtype=np.float32)
        for start in range(0, self.size, EMBED_BATCH):
            batch = self.texts[start : start + EMBED_BATCH]
            vectors[start : start + len(batch)] = model.embed(batch)
        self.embed_seconds = time.perf_counter() - started
        for position, keys in enumerate(self.citations):
            self.semantic.add(self.lexical.slot_of(f"mem_{position:09d}"), vectors[position], keys)

    def _terms(self, query: str) -> list[str]:
        return list(dict.fromkeys(query_terms(query, identity_term)))

    def lexical_ids(self, query: str) -> list[str]:
        ranked = rank_in_index(
            self.lexical,
            self._terms(query),
            system_as_of=self.size,
            valid_as_of=VALID_AS_OF,
            now_ms=VALID_AS_OF,
        )
        return ranked.record_ids

    def semantic_ids(self, query: str) -> list[str]:
        vector = self.model.embed([query])[0]
        ranked = rank_with_projections(
            self.lexical,
            self.semantic,
            self._terms(query),
            vector,
            system_as_of=self.size,
            valid_as_of=VALID_AS_OF,
            now_ms=VALID_AS_OF,
        )
        return ranked.record_ids

    def diagnostic_ids(self, query: str) -> dict[str, list[str]]:
        """Not product profiles: the vector list alone, and RRF(lexical, vector) w/o PPR."""
        vector = self.model.embed([query])[0]
        eligible = eligible_bm25(
            self.lexical,
            self._terms(query),
            system_as_of=self.size,
            valid_as_of=VALID_AS_OF,
            now_ms=VALID_AS_OF,
        )
        ids = [self.lexical.record_ids[int(s)] for s in eligible.slots]
        similarity = self.semantic.similarities(vector, eligible.slots)
        by_vector = sorted(
            (i for i in range(len(ids)) if similarity[i] > 0),
            key=lambda i: (-similarity[i], utf16_key(ids[i])),
        )[:2000]
        by_lexical = sorted(
            (i for i in range(len(ids)) if eligible.bm25[i] > 0),
            key=lambda i: (-eligible.bm25[i], utf16_key(ids[i])),
        )[:2000]
        fused: dict[int, float] = {}
        for ordered in (by_lexical, by_vector):
            for position, i in enumerate(ordered, start=1):
                fused[i] = fused.get(i, 0.0) + 1 / (RRF_K + position)
        two_lists = sorted(fused, key=lambda i: (-fused[i], utf16_key(ids[i])))
        ppr = np.round(
            personalized_pagerank(
                self.semantic.induced(eligible.slots, len(self.lexical.record_ids)), eligible.bm25
            ),
            PPR_SCORE_DECIMALS,
        )
        graph = channel_order(ppr, id_ranks(self.lexical.id_keys(eligible.slots)), 0.0).tolist()
        self.overlap.append(
            len(set(graph[:60]) & set(by_lexical[:60])) / max(1, min(60, len(by_lexical)))
        )
        self.lexical_hits.append(len(by_lexical))
        return {
            "vector_only (diagnostic)": [ids[i] for i in by_vector],
            "rrf_lexical_vector_no_ppr (diagnostic)": [ids[i] for i in two_lists],
        }


def _do_nothing(query: str) -> None:
    """The floor of the timing loop: a Python call that does nothing."""


def _quality(ranked: Sequence[str], target: str) -> tuple[float, float]:
    top = list(ranked[:10])
    if target not in top:
        return 0.0, 0.0
    return 1.0, 1 / math.log2(top.index(target) + 2)


def run_size(size: int, model: EmbeddingModel, repeat: int) -> dict[str, Any]:
    print(f"size {size}: indexing", file=sys.stderr, flush=True)
    corpus = Corpus(size, model)
    quality: dict[str, dict[str, list[tuple[float, float]]]] = {}
    semantic_lists: list[list[str]] = []
    vector_lists: list[list[str]] = []
    for n, (_, paraphrase, keyword) in enumerate(PLANTED):
        target = corpus.targets[n]
        for kind, query in (("paraphrase", paraphrase), ("keyword", keyword)):
            rows = quality.setdefault(kind, {})
            lists = {
                "offline_lexical_v1": corpus.lexical_ids(query),
                "semantic_v1": corpus.semantic_ids(query),
                **corpus.diagnostic_ids(query),
            }
            for name, ranked in lists.items():
                rows.setdefault(name, []).append(_quality(ranked, target))
            if kind == "paraphrase":
                semantic_lists.append(lists["semantic_v1"])
                vector_lists.append(lists["vector_only (diagnostic)"])
    paraphrase_hits = corpus.lexical_hits[0::2]
    paraphrase_overlap = corpus.overlap[0::2]
    timed: dict[str, Callable[[str], object]] = {
        "offline_lexical_v1": corpus.lexical_ids,
        "semantic_v1": corpus.semantic_ids,
        "query embedding alone (part of semantic_v1)": lambda query: model.embed([query]),
        "do-nothing call (floor)": _do_nothing,
    }
    latency: dict[str, list[float]] = {name: [] for name in timed}
    # CPU time of the same calls: on a machine other jobs keep busy, wall time also counts
    # the waits for a core; CPU time is what one call costs (the ranking is single-threaded).
    cpu: dict[str, list[float]] = {name: [] for name in timed}
    queries = [q for _, p, k in PLANTED for q in (p, k)]
    for _ in range(repeat):
        for query in queries:
            for name, rank in timed.items():
                started, started_cpu = time.perf_counter(), time.process_time()
                rank(query)
                cpu[name].append((time.process_time() - started_cpu) * 1000)
                latency[name].append((time.perf_counter() - started) * 1000)
    singles = corpus.texts[:SINGLE_TEXTS]
    started = time.perf_counter()
    for text in singles:
        model.embed([text])
    single_seconds = time.perf_counter() - started
    return {
        "size": size,
        "embedding_records_per_s": round(size / corpus.embed_seconds),
        "embedding_one_text_at_a_time_records_per_s": round(len(singles) / single_seconds),
        "vector_bytes": size * model.dimensions * 4,
        "edges": len(corpus.semantic.edge_rows()),
        "paraphrase_lexical_hits_mean": round(sum(paraphrase_hits) / len(paraphrase_hits)),
        "paraphrase_lexical_hits_each": paraphrase_hits,
        "paraphrase_ppr_top60_is_lexical_top60_each": [round(x, 3) for x in paraphrase_overlap],
        "paraphrase_semantic_v1_rank_each": [
            (ranked.index(corpus.targets[n]) + 1 if corpus.targets[n] in ranked else None)
            for n, ranked in enumerate(semantic_lists)
        ],
        "paraphrase_vector_rank_each": [
            (ranked.index(corpus.targets[n]) + 1 if corpus.targets[n] in ranked else None)
            for n, ranked in enumerate(vector_lists)
        ],
        "paraphrase_ppr_top60_is_lexical_top60": round(
            sum(paraphrase_overlap) / len(paraphrase_overlap), 3
        ),
        "quality": {
            kind: {
                name: {
                    "recall@10": round(sum(r for r, _ in values) / len(values), 3),
                    "ndcg@10": round(sum(g for _, g in values) / len(values), 3),
                }
                for name, values in rows.items()
            }
            for kind, rows in quality.items()
        },
        "latency_ms": {
            name: {
                "n": len(samples),
                "p50": round(percentile(samples, 0.5), 3),
                "p99": round(percentile(samples, 0.99), 3),
                "cpu_p50": round(percentile(cpu[name], 0.5), 3),
            }
            for name, samples in latency.items()
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rss-size", type=int, default=0, help="records for the extra RSS")
    parser.add_argument("--stdio-sizes", default="", help="store sizes measured over stdio")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    _check_paraphrases()
    model = load_embedding_model()
    if not isinstance(model, EmbeddingModel):
        print(f"semantic model unavailable: {model.reason}", file=sys.stderr)
        return 2
    load_before = machine_load()
    report: dict[str, Any] = {
        "command": "python -m bench.semantic_recall " + " ".join(argv or sys.argv[1:]),
        "machine": machine(),
        "load_before": load_before,
        "model_ref": model.model_ref,
        "results": [run_size(int(s), model, args.repeat) for s in args.sizes.split(",")],
        "extra_rss": semantic_costs.extra_rss(args.rss_size) if args.rss_size else None,
        "installed": semantic_costs.installed_size(),
        "stdio": [],
    }
    queries = [q for _, p, k in PLANTED for q in (p, k)]
    for size in (int(s) for s in args.stdio_sizes.split(",") if s):
        _write(report, args.out)  # what is measured so far, should a store build fail
        report["stdio"].append(semantic_costs.over_stdio(size, queries * args.repeat))
    _write(report, args.out)
    print(semantic_report.markdown(report))
    return 0


def _write(report: dict[str, Any], out: Path) -> None:
    report["load_after"] = machine_load()
    out.mkdir(parents=True, exist_ok=True)
    (out / "semantic_recall.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "semantic_recall.md").write_text(semantic_report.markdown(report))
    semantic_report.plot(report, out / "semantic_recall.png")


if __name__ == "__main__":
    sys.exit(main())
