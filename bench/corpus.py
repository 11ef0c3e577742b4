"""A seeded, realistic multi-field corpus in the import JSONL format, and queries drawn from it.

Usage: .venv/bin/python -m bench.corpus --records N --out FILE [--seed S] [--vocabulary V]
       [--queries Q --queries-out FILE]

Each line is exactly the arguments an agent passes to `engram_memory_capture` (SPEC §4.3):
a primary decision component plus evidence and context components of a few sentences each,
two to four citations with `source_ref`s, and an open `valid_time` (no `t_end`) in the past,
so every admitted record is eligible now. Words follow a Zipf law over a vocabulary of common
English words followed by pronounceable synthetic ones, so the head words match far more
than 10 % of the records and the tail words a handful. The same seed gives the same bytes:
timestamps are fixed offsets from a constant base, never the clock.

Queries are 1-3 words: a share drawn from the words of the corpus, a share built around
frequent words (in more than 10 % of the records), and a share of words absent from the
corpus (no hit). Progress on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import re
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PURPOSE = "purpose:support-case"
# 2026-01-01T00:00:00Z: a fixed base keeps the output independent of the clock.
BASE_MS = 1_767_225_600_000
_HEAD_TEXT = (
    "the and for that with was order customer refund this from not ticket were after team "
    "agent payment support account because request delivery issue policy approved which "
    "invoice their has been case review escalation shipment carrier damaged replacement "
    "billing contract renewal discount credit warranty subscription"
)
_HEAD_WORDS = _HEAD_TEXT.split()
_ONSETS: tuple[str, ...] = (
    "b",
    "c",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
)
_ONSETS += ("br", "tr", "st", "pl", "gr", "sh", "ch", "kr", "fl", "dr")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou")
_CODAS = ("", "n", "r", "s", "l", "t", "m", "x", "nd", "rt")
_SOURCES: tuple[str, ...] = (
    "source:helpdesk",
    "source:crm",
    "source:email",
    "source:chat",
    "source:billing",
)
_SOURCES += ("source:warehouse", "source:contract-repo", "source:call-notes")
_EVENTS: tuple[str, ...] = ("event:refund-approved", "event:escalated", "event:credit-issued")
_EVENTS += ("event:replacement-sent", "event:contract-amended", "event:case-closed")
FREQUENT_SHARE = 0.10
_TOKEN = re.compile(r"[^\W]+")


def _synthetic_word(rng: random.Random) -> str:
    syllables = rng.choice((1, 2, 2, 2, 3))
    return "".join(
        rng.choice(_ONSETS)
        + rng.choice(_VOWELS)
        + (rng.choice(_CODAS) if i == syllables - 1 else "")
        for i in range(syllables)
    )


def vocabulary(size: int, seed: int) -> list[str]:
    """`size` distinct words, most frequent first: the common head, then synthetic words."""
    rng = random.Random(f"vocabulary-{seed}")
    words = list(dict.fromkeys(_HEAD_WORDS))
    seen = set(words)
    while len(words) < size:
        word = _synthetic_word(rng)
        if len(word) >= 4 and word not in seen:
            seen.add(word)
            words.append(word)
    return words[:size]


def absent_words(count: int, seed: int, present: set[str]) -> list[str]:
    """Pronounceable words that occur nowhere in the corpus (queries with no hit)."""
    rng = random.Random(f"absent-{seed}")
    words: list[str] = []
    while len(words) < count:
        word = "q" + _synthetic_word(rng) + "q"
        if word not in present and word not in words:
            words.append(word)
    return words


class _Writer:
    """Draws Zipf-distributed words (exponent 1.0) with one seeded generator."""

    def __init__(self, words: Sequence[str], seed: int) -> None:
        self.words = words
        self.rng = random.Random(f"corpus-{seed}")
        self.cumulative = list(
            itertools.accumulate(1.0 / rank for rank in range(1, len(words) + 1))
        )

    def sentence(self) -> str:
        length = self.rng.randint(8, 18)
        tokens = self.rng.choices(self.words, cum_weights=self.cumulative, k=length)
        tokens[0] = tokens[0].capitalize()
        return " ".join(tokens) + "."

    def text(self, low: int, high: int) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(low, high)))

    def digest(self, label: str) -> str:
        return "sha256:" + hashlib.sha256(f"{label}-{self.rng.random()}".encode()).hexdigest()


def capture_arguments(writer: _Writer, seed: int, index: int) -> dict[str, Any]:
    """One capture's arguments: decision (primary), evidence and context components."""
    rng = writer.rng
    citations = [
        {
            "citation_id": f"citation:{n}",
            "source_ref": rng.choice(_SOURCES),
            "locator": {"scheme": "ticket", "value": f"T-{rng.randint(1, 999_999)}"},
            "content_digest": writer.digest(f"citation-{index}-{n}"),
        }
        for n in range(rng.randint(2, 4))
    ]
    ids = [c["citation_id"] for c in citations]
    components = [
        {
            "component_id": "component:decision",
            "kind": "decision",
            "text": writer.text(2, 4),
            "citation_ids": ids[:2],
        },
        {
            "component_id": "component:evidence",
            "kind": "evidence",
            "text": writer.text(1, 3),
            "citation_ids": ids[1:],
        },
        {
            "component_id": "component:context",
            "kind": "context",
            "text": writer.text(1, 3),
            "citation_ids": ids[-1:],
        },
    ]
    at = BASE_MS + index * 60_000
    return {
        "idempotency_key": f"bench-corpus-{seed}-{index:09d}",
        "payload": {
            "schema_version": 2,
            "purpose_ref": PURPOSE,
            "valid_time": {"t": at},
            "components": components,
            "primary_component_id": "component:decision",
            "primary_event": {"at": at, "type_ref": rng.choice(_EVENTS), "citation_id": ids[0]},
            "citations": citations,
        },
        "evidence": {
            "evidence_ref": f"evidence:ticket/{index}",
            "evidence_digest": writer.digest(f"evidence-{index}"),
            "citation_ids": ids[:1],
        },
    }


def generate(records: int, seed: int = 8, vocabulary_size: int = 20_000) -> Iterator[str]:
    """The corpus, one JSON line (with its newline) per record, deterministic in `seed`."""
    writer = _Writer(vocabulary(vocabulary_size, seed), seed)
    for index in range(records):
        line = json.dumps(capture_arguments(writer, seed, index), separators=(",", ":"))
        yield line + "\n"


def write_corpus(path: Path, records: int, seed: int = 8, vocabulary_size: int = 20_000) -> None:
    """Write the corpus to `path`, reporting progress on stderr."""
    step = max(1, records // 10)
    with path.open("w", encoding="utf-8") as out:
        for index, line in enumerate(generate(records, seed, vocabulary_size)):
            out.write(line)
            if (index + 1) % step == 0:
                print(f"  corpus: {index + 1}/{records} records", file=sys.stderr, flush=True)


def record_texts(arguments: dict[str, Any]) -> list[str]:
    """The searchable texts of one line: component texts, then citation source refs."""
    payload = arguments["payload"]
    return [c["text"] for c in payload["components"]] + [
        c["source_ref"] for c in payload["citations"]
    ]


def document_frequencies(path: Path) -> tuple[int, Counter[str]]:
    """(records, df) over the corpus, tokenized as SPEC §10.1 does (lowercase word runs)."""
    df: Counter[str] = Counter()
    records = 0
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                records += 1
                df.update(
                    {
                        t
                        for text in record_texts(json.loads(line))
                        for t in _TOKEN.findall(text.lower())
                    }
                )
    return records, df


@dataclass(frozen=True)
class Query:
    text: str
    kind: str  # "vocabulary", "frequent" or "no-hit"


def queries(path: Path, count: int, seed: int = 8) -> list[Query]:
    """`count` queries for the corpus at `path`: 60 % vocabulary, 20 % frequent, 20 % no hit.

    Raises:
        ValueError: the corpus has no word in more than 10 % of its records.
    """
    records, df = document_frequencies(path)
    present = sorted(w for w in df if len(w) >= 3 and w.isalpha())
    frequent = sorted(w for w in present if df[w] > FREQUENT_SHARE * records)
    if not frequent:
        raise ValueError("no frequent word: the corpus is too small or the vocabulary too flat")
    absent = absent_words(max(8, count // 5), seed, set(df))
    rng = random.Random(f"queries-{seed}")
    made: list[Query] = []
    for n in range(count):
        width = rng.randint(1, 3)
        if n % 5 == 3:
            words = [rng.choice(frequent), *rng.sample(present, width - 1)]
            made.append(Query(" ".join(words), "frequent"))
        elif n % 5 == 4:
            made.append(Query(" ".join(rng.sample(absent, width)), "no-hit"))
        else:
            made.append(Query(" ".join(rng.sample(present, width)), "vocabulary"))
    return made


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--out", required=True, help="the JSONL corpus to write")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--vocabulary", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=0, help="also write this many queries")
    parser.add_argument("--queries-out", help="JSON file for the queries")
    args = parser.parse_args()
    out = Path(args.out)
    write_corpus(out, args.records, args.seed, args.vocabulary)
    if args.queries:
        made = queries(out, args.queries, args.seed)
        target = Path(args.queries_out or out.with_suffix(".queries.json"))
        target.write_text(json.dumps([q.__dict__ for q in made], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
