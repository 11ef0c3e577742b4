"""The harness's own logic: the baselines' loading input, Basic Memory's budget, the report."""

from __future__ import annotations

import json
from pathlib import Path

from bench.corpus import write_corpus
from bench.search_baselines import entity_lines
from bench.search_report import goal_rows, ratios, summarize
from bench.search_scale import LoadingBudget


def test_the_reference_server_gets_one_entity_per_record_with_every_searchable_text(
    tmp_path: Path,
) -> None:
    corpus = tmp_path / "c.jsonl"
    write_corpus(corpus, 20)
    records = [json.loads(line) for line in corpus.read_text().splitlines()]
    entities = [json.loads(line) for line in entity_lines(corpus)]
    assert [e["name"] for e in entities] == [r["idempotency_key"] for r in records]
    for entity, record in zip(entities, records, strict=True):
        assert entity["type"] == "entity"
        texts = [c["text"] for c in record["payload"]["components"]]
        assert entity["observations"][: len(texts)] == texts


def test_a_size_the_measured_loading_rate_cannot_reach_in_the_budget_is_not_tried() -> None:
    budget = LoadingBudget(100.0)
    assert budget.refusal(1_000) is None
    budget.spent(1_000, 50.0)  # 20 records/s, 50 s left
    assert budget.refusal(500) is None
    assert budget.refusal(10_000) is not None
    budget.spent(500, 60.0)
    assert budget.refusal(1) is not None


def _raw(engram_ms: float, reference_ms: float) -> dict[str, object]:
    kinds = ["vocabulary", "frequent", "no-hit", "vocabulary"]
    return {
        "size": 10_000,
        "query kinds": kinds,
        "skipped": {"basic-memory": "not reached"},
        "engram": {
            "search in-process": [1.0, 1.5, 2.5, 1.0],
            "search stdio": [engram_ms] * 4,
            "get in-process": [0.5, 0.7],
            "hits": [3, 10, 0, 1],
            "rss bytes": 300 * 1024 * 1024,
            "data bytes": 50_000_000,
        },
        "reference": {"search stdio": [reference_ms] * 4, "hits": [0, 5, 0, 0]},
        "floor": {"search stdio": [1.0] * 4},
    }


def test_ratios_say_how_many_times_slower_each_baseline_is_than_engram() -> None:
    summary = summarize(_raw(engram_ms=4.0, reference_ms=40.0))
    assert ratios(summary["systems"]) == {"reference": {"p50": 10.0, "p99": 10.0}}
    assert summary["systems"]["engram"]["queries with a hit"] == 3
    assert summary["systems"]["engram"]["data bytes per record"] == 5_000
    assert set(summary["systems"]["engram"]["search stdio by query kind"]) == {
        "frequent",
        "no-hit",
        "vocabulary",
    }


def test_goals_are_marked_met_or_missed_from_the_measured_figures() -> None:
    results = {"10000": summarize(_raw(engram_ms=6.0, reference_ms=40.0))}
    verdicts = {row["measure"]: row["met"] for row in goal_rows(results)}
    assert verdicts == {
        "search in-process p50": True,
        "search in-process p99": True,
        "search stdio p50": False,
        "get in-process p50": True,
    }
