"""How hard the never-store detector is to dodge, how often it cries wolf, and what it costs.

Usage: python -m bench.secret_detector [--rounds 30] [--out DIR]

Rates (issue 23 item 1), on the committed corpora of tests/assets/secrets/:
- disguised secrets refused (goal >= 95 %), per source (the issue's 38, our own) and family;
- ordinary multilingual support-ticket captures refused (goal <= 0.5 %).
Each capture is judged exactly as the server judges it: `parsing.holds_secret` on well-formed
capture arguments (every stored string, plus the seam view of texts and locators).

Latency (goal: p50 <= 1 ms for a 4 KiB text): captures holding one 4,096-byte text built from
the ordinary corpus, 20 per language, scanned `--rounds` times each. The floor, measured in
the same run over the same texts, is one `unicodedata.normalize("NFKC", text)` pass: the
least any Unicode-aware scan must pay. The machine load (`uptime`) is recorded before and after.
"""

from __future__ import annotations

import argparse
import sys
import time
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from tests.contract.secret_corpus import Sample, capture_arguments, disguises, ordinary

from bench.report import RESULTS, machine_load, percentile, write_report
from engram_memory.contract.parsing import ToolName, holds_secret
from engram_memory.contract.secrets import DEFAULT_DETECTOR, detector_for

PURPOSE = "purpose:support-case"
TEXT_BYTES = 4096
TEXTS_PER_LANGUAGE = 20
_SENTENCE_ENDS = (".", "。", "!", "?")


def _refused(sample: Sample) -> bool:
    arguments = capture_arguments(sample, "bench-secret-key-0001", PURPOSE)
    return holds_secret(ToolName.CAPTURE, arguments, detector_for(sample.extra_patterns))


def _rates() -> dict[str, Any]:
    disguised = disguises()
    missed = [s for s in disguised if not _refused(s)]
    by_source: Counter[str] = Counter(s.source for s in disguised)
    missed_by_source: Counter[str] = Counter(s.source for s in missed)
    families: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for sample in disguised:
        families[sample.family][1] += 1
        families[sample.family][0] += sample not in missed
    plain = ordinary()
    false_alarms = [s for s in plain if _refused(s)]
    return {
        "disguises": len(disguised),
        "disguises_refused": len(disguised) - len(missed),
        "by_source": {
            source: f"{count - missed_by_source[source]}/{count}"
            for source, count in by_source.items()
        },
        "families": {family: f"{hit}/{total}" for family, (hit, total) in sorted(families.items())},
        "missed": [s.sample_id for s in missed],
        "ordinary": len(plain),
        "ordinary_refused": len(false_alarms),
        "false_alarms": [s.sample_id for s in false_alarms],
    }


def _four_kib_texts() -> dict[str, list[str]]:
    """Per language, `TEXTS_PER_LANGUAGE` texts of exactly TEXT_BYTES UTF-8 bytes or just under."""
    pools: dict[str, list[str]] = defaultdict(list)
    for sample in ordinary():
        pools[sample.family].extend(sample.texts)
    texts: dict[str, list[str]] = {}
    for language, pool in sorted(pools.items()):
        built = []
        for offset in range(TEXTS_PER_LANGUAGE):
            parts, size, index = [], 0, offset
            while size < TEXT_BYTES:
                part = pool[index % len(pool)]
                parts.append(part)
                size += len(part.encode()) + 1
                index += 1
            text = " ".join(parts).encode()[:TEXT_BYTES].decode("utf-8", errors="ignore")
            # End at the last sentence end, as a stored text does (a text cut mid-word and
            # run into its locator in the seam view would be an artifact of the benchmark).
            built.append(text[: max(text.rfind(end) for end in _SENTENCE_ENDS) + 1])
        texts[language] = built
    return texts


def _timed(
    function: Any, argument: Any, rounds: int, clock: Any = time.perf_counter_ns
) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = clock()
        function(argument)
        samples.append((clock() - started) / 1e6)
    return samples


def _latency(rounds: int) -> dict[str, dict[str, list[float]]]:
    texts = _four_kib_texts()
    per_language: dict[str, list[float]] = {}
    overall: dict[str, list[float]] = {
        "floor: one NFKC pass": [],
        "detector scan": [],
        "floor: NFKC, CPU time": [],
        "detector scan, CPU time": [],
    }
    sizes: list[int] = []
    for language, language_texts in texts.items():
        scans: list[float] = []
        for index, text in enumerate(language_texts):
            sample = Sample(f"bench-{language}-{index}", language, "bench", (text,), ("T-4711",))
            arguments = capture_arguments(sample, "bench-secret-key-0001", PURPOSE)

            def scan(args: dict[str, Any]) -> bool:
                return holds_secret(ToolName.CAPTURE, args, DEFAULT_DETECTOR)

            def nfkc(value: str) -> str:
                return unicodedata.normalize("NFKC", value)

            if scan(arguments):
                raise SystemExit(f"ordinary 4 KiB text refused: {language} {index}")
            scan(arguments)  # warm
            sizes.append(len(text.encode()))
            scans += _timed(scan, arguments, rounds)
            overall["floor: one NFKC pass"] += _timed(nfkc, text, rounds)
            cpu = time.thread_time_ns
            overall["detector scan, CPU time"] += _timed(scan, arguments, rounds, cpu)
            overall["floor: NFKC, CPU time"] += _timed(nfkc, text, rounds, cpu)
        per_language[language] = scans
        overall["detector scan"] += scans
        print(f"{language}: p50 {percentile(scans, 0.5):.3f} ms", file=sys.stderr)
    print(f"text sizes {min(sizes)}..{max(sizes)} bytes", file=sys.stderr)
    return {"4 KiB capture, all languages": overall, "detector scan per language": per_language}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = machine_load()
    rates = _rates()
    series = _latency(args.rounds)
    load_after = machine_load()
    scans = series["4 KiB capture, all languages"]["detector scan"]
    floors = series["4 KiB capture, all languages"]["floor: one NFKC pass"]
    cpu_scans = series["4 KiB capture, all languages"]["detector scan, CPU time"]
    disguised_rate = rates["disguises_refused"] / rates["disguises"]
    ordinary_rate = rates["ordinary_refused"] / rates["ordinary"]
    extra = {
        "load before": load_before,
        "load after": load_after,
        "disguises refused": f"{rates['disguises_refused']}/{rates['disguises']}"
        f" = {disguised_rate:.1%} (goal >= 95 %)",
        "disguises refused by source": rates["by_source"],
        "disguises refused by family": rates["families"],
        "disguises missed": rates["missed"] or "none",
        "ordinary captures refused": f"{rates['ordinary_refused']}/{rates['ordinary']}"
        f" = {ordinary_rate:.2%} (goal <= 0.5 %)",
        "ordinary captures refused (ids)": rates["false_alarms"] or "none",
        "4 KiB scan p50 / p99": f"{percentile(scans, 0.5):.3f} / {percentile(scans, 0.99):.3f} ms"
        " (goal p50 <= 1 ms)",
        "floor (NFKC) p50 / p99": f"{percentile(floors, 0.5):.3f} / "
        f"{percentile(floors, 0.99):.3f} ms",
        "4 KiB scan CPU time p50 / p99": f"{percentile(cpu_scans, 0.5):.3f} / "
        f"{percentile(cpu_scans, 0.99):.3f} ms (thread CPU time: what the scan costs on a"
        " machine shared with other work)",
    }
    command = f"python -m bench.secret_detector --rounds {args.rounds}"
    print(
        write_report(
            "secret_detector",
            "Never-store detector: disguises refused, ordinary text refused, scan cost",
            command,
            series,
            "ms",
            out=args.out,
            extra=extra,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
