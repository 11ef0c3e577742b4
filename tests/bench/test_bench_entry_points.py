"""Every `python -m bench.X` entry point runs at its smallest size, so that none can rot.

Each runs as an operator runs it (a subprocess from the repository root) with its results
written into the test's own directory, never over the committed ones in bench/results/. The
search-at-scale and gateway harnesses have their own smokes beside this file; these check that
a run completes and writes its report, not its figures (too few samples to mean anything).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bench.runner import ROOT, run_bench

COMMITTED = ROOT / "bench" / "results"

pytestmark = pytest.mark.e2e


def _written(out: Path, name: str) -> dict[str, object]:
    for suffix in ("md", "png"):
        assert (out / f"{name}.{suffix}").stat().st_size > 0
    document: dict[str, object] = json.loads((out / f"{name}.json").read_text())
    return document


def _digests() -> dict[str, str]:
    return {
        str(path.relative_to(COMMITTED)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(COMMITTED.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(autouse=True)
def committed_results_untouched() -> Iterator[None]:
    before = _digests()
    yield
    assert _digests() == before


def test_tools_stdio_tiny(tmp_path: Path) -> None:
    run_bench("tools_stdio", "--rounds", "2", "--out", str(tmp_path))
    _written(tmp_path, "tools_stdio")


def test_hot_path_tiny(tmp_path: Path) -> None:
    # Two 1 MiB admissions and two growth rounds (--rounds): every phase runs, briefly.
    tiny = ["--rounds", "2", "--large-records", "1100", "--sustained-seconds", "0.2"]
    run_bench("hot_path", *tiny, "--out", str(tmp_path))
    _written(tmp_path, "hot_path")


def test_http_concurrency_tiny_reaches_engram_and_the_floor(tmp_path: Path) -> None:
    tiny = ["--clients", "2", "--seconds", "0.5", "--records", "2"]
    run_bench("http_concurrency", *tiny, "--out", str(tmp_path))
    report = _written(tmp_path, "http_concurrency")
    results = report["results"]
    assert isinstance(results, dict)
    # The floor server answers /healthz like serve (the start-up wait asks it): both ran.
    assert set(results) == {"engram, mixed calls", "floor (do-nothing tool)"}
    assert all(any(samples.values()) for samples in results.values())
    # The floor is served through our own stack to the same signed-context clients: its
    # calls pass the guard and the JSON gate, so an error there would show here.
    figures = report["figures"]
    assert isinstance(figures, dict)
    for side in ("engram", "floor"):
        assert figures[side]["errors"] == 0
        assert figures[side]["server CPU ms/call"] > 0


def test_decision_replay_tiny(tmp_path: Path) -> None:
    run_bench("decision_replay", "--rounds", "2", "--replays", "1", "--out", str(tmp_path))
    figures = _written(tmp_path, "decision_replay")["figures"]
    assert isinstance(figures, dict)
    assert figures["kept decisions"] > 0


def test_store_floor_tiny(tmp_path: Path) -> None:
    run_bench("store_floor", "--rounds", "2", "--out", str(tmp_path))
    _written(tmp_path, "store_floor")


def test_store_floor_pairs_report_tiny(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for side in ("before", "after"):
        run_bench("store_floor", "--rounds", "2", "--out", str(tmp_path / side))
        runs.mkdir(exist_ok=True)
        shutil.copy(tmp_path / side / "store_floor.json", runs / f"{side}-1.json")
    run_bench("pairs_report", str(runs))
    pairs = _written(runs, "pairs")
    assert set(pairs["tools p50"]) >= {"capture", "forget"}  # type: ignore[arg-type]


def test_policy_engines_tiny(tmp_path: Path) -> None:
    run_bench("policy_engines", "5", "--out", str(tmp_path))
    _written(tmp_path, "policy_engines")


def test_corpus_then_import_speed_then_search_store_tiny(tmp_path: Path) -> None:
    corpus, queries = tmp_path / "corpus.jsonl", tmp_path / "queries.json"
    run_bench("corpus", "--records", "30", "--out", str(corpus), "--queries", "5",
           "--queries-out", str(queries))  # fmt: skip
    assert len(corpus.read_text().splitlines()) == 30
    assert json.loads(queries.read_text())
    run_bench("import_speed", "--corpus", str(corpus), "--batch", "10", "--out", str(tmp_path))
    _written(tmp_path, "import_speed")
    split = json.loads(run_bench("import_cpu_split", "--corpus", str(corpus), "--batch", "10"))
    assert (split["exit"], split["lines"]) == (0, 30)
    assert split["writer_cpu_ms_per_line"] > 0
    assert split["workers_cpu_ms_per_line"] > 0
    store = tmp_path / "store"
    record = json.loads(run_bench("search_store", "--records", "20", "--dir", str(store)))
    assert record["records"] == 20
    assert (store / "load.json").is_file()


def test_search_report_rewrites_a_committed_run_into_a_copy(tmp_path: Path) -> None:
    copy = tmp_path / "search_scale.json"
    shutil.copyfile(COMMITTED / "search_scale.json", copy)
    run_bench("search_report", str(copy))
    assert (tmp_path / "search_scale.md").stat().st_size > 0
    assert (tmp_path / "search_scale.png").stat().st_size > 0


def test_key_scan_tiny(tmp_path: Path) -> None:
    run_bench("key_scan", "--files", "50", "--runs", "1", "--probes", "10", "--out", str(tmp_path))
    _written(tmp_path, "key_scan")


def test_secret_detector_tiny(tmp_path: Path) -> None:
    run_bench("secret_detector", "--rounds", "1", "--out", str(tmp_path))
    report = _written(tmp_path, "secret_detector")
    figures = report["figures"]
    assert isinstance(figures, dict)
    assert str(figures["disguises refused"]).startswith("92/92")


def test_semantic_recall_tiny(tmp_path: Path) -> None:
    run_bench("semantic_recall", "--sizes", "240", "--repeat", "1", "--out", str(tmp_path))
    report = _written(tmp_path, "semantic_recall")
    [result] = report["results"]  # type: ignore[misc]
    assert set(result["quality"]) == {"paraphrase", "keyword"}
    assert {"offline_lexical_v1", "semantic_v1"} <= set(result["quality"]["paraphrase"])
