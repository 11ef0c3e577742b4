"""Issue 23's goals for the never-store detector, measured on the committed corpora.

>= 95 % of disguised secrets refused, <= 0.5 % of ordinary support-ticket captures refused,
each capture judged as the server judges it (`parsing.holds_secret` on well-formed
arguments). The corpora are the ones the generators in tests/assets/secrets/ write, and the
rule data is the one scripts/secret_rules.py derives from the installed detect-secrets.
bench/secret_detector.py reports the same rates with the scan cost.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from engram_memory.contract.parsing import INPUT_MODELS, ToolName, holds_secret
from engram_memory.contract.secrets import detector_for
from tests.contract.secret_corpus import (
    ASSETS,
    DISGUISES,
    ORDINARY,
    Sample,
    capture_arguments,
    disguises,
    ordinary,
)

ROOT = Path(__file__).resolve().parents[2]
MIN_REFUSED = 0.95
MAX_FALSE_ALARMS = 0.005


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _refused(sample: Sample) -> bool:
    arguments = capture_arguments(sample, "corpus-key-000001", "purpose:support-case")
    INPUT_MODELS[ToolName.CAPTURE].model_validate(
        arguments
    )  # well formed: only a secret refuses it
    return holds_secret(ToolName.CAPTURE, arguments, detector_for(sample.extra_patterns))


def test_the_committed_corpora_are_what_their_generators_write() -> None:
    assert DISGUISES.read_text("utf-8") == _module(ASSETS / "make_disguises.py").render()
    assert ORDINARY.read_text("utf-8") == _module(ASSETS / "make_ordinary.py").render()


def test_the_corpora_are_as_large_as_the_issue_asks() -> None:
    disguised = disguises()
    assert sum(s.source == "issue-23" for s in disguised) >= 38
    assert len(disguised) >= 80
    plain = ordinary()
    assert len(plain) >= 1000
    assert len({s.family for s in plain}) >= 10  # languages


def test_at_least_95_percent_of_disguised_secrets_are_refused() -> None:
    disguised = disguises()
    missed = [s.sample_id for s in disguised if not _refused(s)]
    assert 1 - len(missed) / len(disguised) >= MIN_REFUSED, missed


def test_at_most_half_a_percent_of_ordinary_tickets_are_refused() -> None:
    plain = ordinary()
    refused = [s.sample_id for s in plain if _refused(s)]
    assert len(refused) / len(plain) <= MAX_FALSE_ALARMS, refused


def test_the_rule_data_is_what_the_installed_detect_secrets_yields() -> None:
    committed = json.loads((ROOT / "service/engram_memory/contract/secret_rules.json").read_text())
    assert committed == _module(ROOT / "scripts/secret_rules.py").build()
