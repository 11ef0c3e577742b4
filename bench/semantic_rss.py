"""The in-process RSS the semantic channel adds at N records, measured in this process
(`bench.semantic_costs.extra_rss` runs it as a child, so nothing else is in its memory):
the lexical index alone, then with the semantic projection, as `bench.semantic_recall`'s
`Corpus` builds them. Prints one JSON object.

    .venv/bin/python -m bench.semantic_rss --records 100000
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.semantic_recall import Corpus
from engram_memory.search.embedding import EmbeddingModel, load_embedding_model

_MIB = 1024 * 1024


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _rss_child(records: int) -> dict[str, Any]:
    corpus = Corpus(records, None)
    gc.collect()
    lexical_only = _rss_bytes()
    model = load_embedding_model()
    if not isinstance(model, EmbeddingModel):
        raise RuntimeError(f"semantic model unavailable: {model.reason}")
    corpus.add_semantic(model)
    gc.collect()
    with_semantic = _rss_bytes()
    return {
        "records": records,
        "rss_lexical_only_mib": round(lexical_only / _MIB, 1),
        "rss_with_semantic_mib": round(with_semantic / _MIB, 1),
        "extra_rss_mib": round((with_semantic - lexical_only) / _MIB, 1),
        "embedding_records_per_s": round(records / corpus.embed_seconds),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = _rss_child(args.records)
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
