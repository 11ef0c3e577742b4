"""The benchmark corpus: seeded, well-formed captures, and queries of the promised kinds."""

from __future__ import annotations

import json
from pathlib import Path

from bench.corpus import FREQUENT_SHARE, document_frequencies, queries, write_corpus

from engram_memory.contract.capture import CaptureInput

RECORDS = 300


def _corpus(tmp_path: Path, name: str, seed: int = 8) -> Path:
    path = tmp_path / name
    write_corpus(path, RECORDS, seed)
    return path


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_bytes(tmp_path: Path) -> None:
    first, again = _corpus(tmp_path, "a.jsonl"), _corpus(tmp_path, "b.jsonl")
    other = _corpus(tmp_path, "c.jsonl", seed=9)
    assert first.read_bytes() == again.read_bytes()
    assert first.read_bytes() != other.read_bytes()


def test_every_line_is_a_valid_capture_with_three_component_kinds_and_an_open_valid_time(
    tmp_path: Path,
) -> None:
    lines = _corpus(tmp_path, "a.jsonl").read_text().splitlines()
    assert len(lines) == RECORDS
    for line in lines:
        arguments = json.loads(line)
        CaptureInput.model_validate(arguments)
        payload = arguments["payload"]
        assert {c["kind"] for c in payload["components"]} == {"decision", "evidence", "context"}
        assert "t_end" not in payload["valid_time"]
        assert len(payload["citations"]) >= 2


def test_queries_mix_corpus_words_frequent_words_and_words_absent_from_the_corpus(
    tmp_path: Path,
) -> None:
    path = _corpus(tmp_path, "a.jsonl")
    records, df = document_frequencies(path)
    made = queries(path, 50)
    assert {q.kind for q in made} == {"vocabulary", "frequent", "no-hit"}
    for query in made:
        words = query.text.split()
        assert 1 <= len(words) <= 3
        if query.kind == "no-hit":
            assert all(df[w] == 0 for w in words)
        elif query.kind == "frequent":
            assert df[words[0]] > FREQUENT_SHARE * records
        else:
            assert all(df[w] > 0 for w in words)
