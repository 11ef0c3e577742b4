"""Golden vectors of SPEC §9.7: our digests must match the reference engine byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

from engram_memory.contract.canonical import canonical_json, normalize
from engram_memory.contract.digests import payload_digest, record_digest, record_id_for

ASSETS = Path(__file__).parent.parent / "assets"


def _vectors() -> dict[str, object]:
    return json.loads((ASSETS / "golden_vectors.json").read_text(encoding="utf-8"))


def test_golden_payload_is_already_in_jcs_form() -> None:
    raw = (ASSETS / "golden_payload_v2.json").read_bytes().strip()
    assert canonical_json(normalize(json.loads(raw))) == raw


def test_payload_digest_matches_reference_engine_vector() -> None:
    vectors = _vectors()
    payload = normalize(json.loads((ASSETS / str(vectors["payload_file"])).read_text("utf-8")))
    assert payload_digest(payload) == vectors["payload_digest"]


def test_record_digest_and_record_id_match_derived_vector() -> None:
    vectors = _vectors()
    payload = normalize(json.loads((ASSETS / str(vectors["payload_file"])).read_text("utf-8")))
    extra = vectors["record_extra"]
    assert isinstance(extra, dict)
    record = {**payload, "payload_digest": vectors["payload_digest"], **extra}
    digest_value = record_digest(record)
    assert digest_value == vectors["record_digest"]
    assert record_id_for(digest_value) == vectors["record_id"]
    assert len(record_id_for(digest_value)) == len("mem_") + 52
