"""The committed secret-detection corpora (tests/assets/secrets/) as capture arguments.

Shared by tests/contract/test_secret_corpora.py (the rates), tests/adversarial (the real
server) and bench/secret_detector.py (rates and latency).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "secrets"
DISGUISES = ASSETS / "disguises.json"
ORDINARY = ASSETS / "ordinary.json"


@dataclass(frozen=True)
class Sample:
    """One capture of a corpus."""

    sample_id: str
    family: str
    source: str
    texts: tuple[str, ...]
    locators: tuple[str, ...] = ()
    refs: dict[str, str] = field(default_factory=dict)
    extra_patterns: tuple[str, ...] = ()


def _load(path: Path) -> list[Sample]:
    return [
        Sample(
            sample_id=item["id"],
            family=item["family"],
            source=item.get("source", "generated"),
            texts=tuple(item["texts"]),
            locators=tuple(item.get("locators", ())),
            refs=dict(item.get("refs", {})),
            extra_patterns=tuple(item.get("extra_patterns", ())),
        )
        for item in json.loads(path.read_text(encoding="utf-8"))
    ]


def disguises() -> list[Sample]:
    return _load(DISGUISES)


def ordinary() -> list[Sample]:
    return _load(ORDINARY)


def capture_arguments(sample: Sample, idempotency_key: str, purpose_ref: str) -> dict[str, Any]:
    """A well-formed capture holding `sample`'s texts, locators and references."""
    at = 1_780_000_000_000
    components = [
        {
            "component_id": f"component:{index}",
            "kind": "context" if index else "decision",
            "text": text,
            "citation_ids": ["citation:0"],
        }
        for index, text in enumerate(sample.texts)
    ]
    locators = sample.locators or ("T-4711",)
    citations = [
        {
            "citation_id": f"citation:{index}",
            "source_ref": sample.refs.get("source_ref", "source:helpdesk"),
            "locator": {"scheme": "ticket", "value": value},
            "content_digest": "sha256:" + "ab" * 32,
        }
        for index, value in enumerate(locators)
    ]
    return {
        "idempotency_key": idempotency_key,
        "payload": {
            "schema_version": 2,
            "purpose_ref": purpose_ref,
            "valid_time": {"t": at},
            "components": components,
            "primary_component_id": "component:0",
            "primary_event": {"at": at, "type_ref": "event:note", "citation_id": "citation:0"},
            "citations": citations,
        },
        "evidence": {
            "evidence_ref": sample.refs.get("evidence_ref", "evidence:ticket/T-4711"),
            "evidence_digest": "sha256:" + "cd" * 32,
            "citation_ids": ["citation:0"],
        },
    }
