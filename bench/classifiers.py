"""What content classifiers cost on every capture and admission (issue 22 item 1).

Usage: python -m bench.classifiers [--rounds 20] [--out DIR]

The service runs a scope's classifiers over each component kind's text on every capture and
admission. Measured here, on the ordinary multilingual support texts of the never-store
benchmark (tests/assets/secrets/), one decision component per capture:

- the shipped acme/accounts set (a 12-term list, `iban`, `payment_card`) and a set with
  every detector (plus `email` and `phone`) on 4 KiB texts;
- the same sets on the same texts repeated to 4, 16 and 64 KiB, per KiB: a flat line is
  linear work (one Aho-Corasick pass per term list, bounded candidate patterns per
  detector);
- the floor: one NFKC pass over the text, the least any Unicode-aware scan pays;
- compiling a set (once per bundle revision that changes its definitions).
The machine load (`uptime`) is recorded before and after.
"""

from __future__ import annotations

import argparse
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

import yaml

from bench.report import RESULTS, machine_load, percentile, write_report
from bench.secret_detector import _four_kib_texts
from engram_memory.contract.classifiers import ClassifierSet, texts_by_kind
from engram_memory.policy.authoring.classifier_data import ClassifierDefinition

ACME = Path(__file__).resolve().parents[1] / "policies" / "acme.yaml"
SIZES_KIB = (4, 16, 64)


def _shipped_set() -> list[dict[str, Any]]:
    accounts = yaml.safe_load(ACME.read_text("utf-8"))["workspaces"]["accounts"]
    return [ClassifierDefinition.model_validate(c).compiled() for c in accounts["classifiers"]]


def _every_detector() -> list[dict[str, Any]]:
    return [
        *_shipped_set(),
        {"name": "email", "detector": "email"},
        {"name": "phone", "detector": "phone", "region": "DE"},
    ]


def _payload(text: str) -> dict[str, Any]:
    return {
        "primary_component_id": "component:decision",
        "components": [{"component_id": "component:decision", "kind": "decision", "text": text}],
        "citations": [{"source_ref": "source:helpdesk", "locator": {"value": "T-4711"}}],
    }


def _timed(function: Any, argument: Any, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        function(argument)
        samples.append((time.perf_counter_ns() - started) / 1e6)
    return samples


# The per-KiB series repeat the same few texts per language at every size, so the only
# thing that changes along it is the length (a flat line is linear work).
_PER_LANGUAGE_SCALED = 3


def _texts(kib: int, per_language: int) -> list[str]:
    """Texts of about `kib` KiB: the 4 KiB ordinary texts, each repeated."""
    return [
        " ".join([text] * (kib // 4))
        for texts in _four_kib_texts().values()
        for text in texts[:per_language]
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = machine_load()
    sets = {"acme/accounts set": _shipped_set(), "every detector": _every_detector()}
    compile_ms = {}
    for label, definitions in sets.items():
        started = time.perf_counter_ns()
        ClassifierSet(definitions)
        compile_ms[label] = (time.perf_counter_ns() - started) / 1e6
    compiled = {label: ClassifierSet(d) for label, d in sets.items()}
    four: dict[str, list[float]] = {"floor: one NFKC pass": []}
    per_kib: dict[str, list[float]] = {}
    matched = 0
    every_four = _texts(4, 20)
    for label, classifiers in compiled.items():
        four[label] = []
        for text in every_four:
            kinds = texts_by_kind(_payload(text))
            matched += bool(classifiers.classify(kinds))
            four[label] += _timed(classifiers.classify, kinds, args.rounds)
    for text in every_four:
        four["floor: one NFKC pass"] += _timed(
            lambda t: unicodedata.normalize("NFKC", t), text, args.rounds
        )
    for kib in SIZES_KIB:
        for label, classifiers in compiled.items():
            samples: list[float] = []
            for text in _texts(kib, _PER_LANGUAGE_SCALED):
                kinds = texts_by_kind(_payload(text))
                samples += _timed(classifiers.classify, kinds, args.rounds)
            per_kib[f"{label}, {kib} KiB text, per KiB"] = [s / kib for s in samples]
        print(f"{kib} KiB done", file=sys.stderr)
    load_after = machine_load()
    extra: dict[str, object] = {
        "load before": load_before,
        "load after": load_after,
        "texts": f"{len(every_four)} ordinary texts of 4 KiB; per KiB: the first "
        f"{_PER_LANGUAGE_SCALED} per language, repeated to each size",
        "4 KiB captures any classifier marked (both sets)": f"{matched} of {2 * len(every_four)}",
        **{
            f"{label} on 4 KiB p50 / p99": f"{percentile(s, 0.5):.3f} / "
            f"{percentile(s, 0.99):.3f} ms"
            for label, s in four.items()
        },
        **{
            f"compile {label}": f"{ms:.1f} ms (once per revision)"
            for label, ms in compile_ms.items()
        },
    }
    print(
        write_report(
            "classifiers",
            "Content classifiers: cost per capture, linear in the text",
            f"python -m bench.classifiers --rounds {args.rounds}",
            {"4 KiB capture": four, "per KiB of text": per_kib},
            "ms",
            out=args.out,
            extra=extra,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
