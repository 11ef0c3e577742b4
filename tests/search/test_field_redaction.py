"""Field-allowlist redaction by omission (SPEC §4.1 "Redaction")."""

from __future__ import annotations

from typing import Any

import pytest

from engram_memory.contract.digests import domain_digest
from engram_memory.search.redaction import decode_pointer, redact, redaction_receipt_digest

RECORD_ID = "mem_" + "a" * 52


def _record() -> dict[str, Any]:
    return {
        "record_id": RECORD_ID,
        "record_digest": "sha256:" + "1" * 64,
        "purpose_ref": "purpose:ops",
        "components": [
            {
                "component_id": "c1",
                "kind": "decision",
                "text": "Adopt Postgres",
                "citation_ids": ["k1"],
            }
        ],
        "trust": {"class": "asserted", "issued_at": "2026-01-01T00:00:00.000Z", "verifier_id": "v"},
        "valid_time": {"t": 1, "t_end": 2},
        "derivation": {"sources": ["mem_b"]},
        "a/b": 1,
        "t~x": 2,
    }


def test_empty_allowlist_discloses_only_the_record_id() -> None:
    redacted, omitted = redact(_record(), [], allow_derivation_lineage=False)
    assert redacted == {"record_id": RECORD_ID}
    assert omitted == [
        "/a~1b",
        "/components",
        "/derivation",
        "/purpose_ref",
        "/record_digest",
        "/trust",
        "/t~0x",
        "/valid_time",
    ]


def test_pointer_copies_its_member_whole() -> None:
    redacted, omitted = redact(_record(), ["/trust"], allow_derivation_lineage=False)
    assert redacted == {"record_id": RECORD_ID, "trust": _record()["trust"]}
    assert "/trust" not in omitted


def test_nested_pointer_copies_only_that_member() -> None:
    redacted, omitted = redact(_record(), ["/trust/class"], allow_derivation_lineage=False)
    assert redacted["trust"] == {"class": "asserted"}
    # A partially copied top-level key is present, so it is not listed as redacted.
    assert "/trust" not in omitted


def test_empty_pointer_copies_everything_except_lineage_when_not_allowed() -> None:
    redacted, omitted = redact(_record(), [""], allow_derivation_lineage=False)
    assert redacted == {k: v for k, v in _record().items() if k != "derivation"}
    assert omitted == ["/derivation"]


def test_lineage_is_disclosed_only_when_allowed_and_selected() -> None:
    allowed, _ = redact(_record(), [""], allow_derivation_lineage=True)
    assert allowed == _record()
    selected, _ = redact(_record(), ["/derivation"], allow_derivation_lineage=True)
    assert selected["derivation"] == {"sources": ["mem_b"]}
    not_selected, _ = redact(_record(), ["/trust"], allow_derivation_lineage=True)
    assert "derivation" not in not_selected
    refused, omitted = redact(
        _record(), ["/derivation", "/derivation/sources"], allow_derivation_lineage=False
    )
    assert "derivation" not in refused
    assert "/derivation" in omitted


@pytest.mark.parametrize(
    "pointer", ["/components/0", "/components/0/text", "/derivation/sources/0"]
)
def test_path_crossing_into_an_array_copies_nothing(pointer: str) -> None:
    redacted, _ = redact(_record(), [pointer], allow_derivation_lineage=True)
    assert redacted == {"record_id": RECORD_ID}


def test_pointer_ending_at_an_array_copies_the_array_whole() -> None:
    redacted, _ = redact(_record(), ["/components"], allow_derivation_lineage=False)
    assert redacted["components"] == _record()["components"]


@pytest.mark.parametrize(
    "pointer", ["/trust/missing", "/missing", "/purpose_ref/x", "/valid_time/t/x"]
)
def test_pointer_to_a_missing_member_leaves_no_empty_parent(pointer: str) -> None:
    redacted, _ = redact(_record(), [pointer], allow_derivation_lineage=False)
    assert redacted == {"record_id": RECORD_ID}


def test_escaped_pointers_select_keys_with_slash_and_tilde() -> None:
    redacted, omitted = redact(_record(), ["/a~1b", "/t~0x"], allow_derivation_lineage=False)
    assert redacted["a/b"] == 1
    assert redacted["t~x"] == 2
    assert "/a~1b" not in omitted
    assert "/t~0x" not in omitted


def test_pointer_escapes_decode_tilde_one_before_tilde_zero() -> None:
    assert decode_pointer("/~01") == ["~1"]
    assert decode_pointer("/a~1b/~0") == ["a/b", "~"]
    assert decode_pointer("/") == [""]
    assert decode_pointer("") == []


def test_overlapping_pointers_form_a_union() -> None:
    whole, _ = redact(_record(), ["/trust", "/trust/class"], allow_derivation_lineage=False)
    assert whole["trust"] == _record()["trust"]
    reversed_order, _ = redact(
        _record(), ["/trust/class", "/trust"], allow_derivation_lineage=False
    )
    assert reversed_order == whole
    two, _ = redact(_record(), ["/trust/class", "/trust/issued_at"], allow_derivation_lineage=False)
    assert two["trust"] == {"class": "asserted", "issued_at": "2026-01-01T00:00:00.000Z"}


def test_record_id_is_present_even_if_only_other_fields_are_allowed() -> None:
    redacted, omitted = redact(_record(), ["/purpose_ref"], allow_derivation_lineage=False)
    assert redacted == {"record_id": RECORD_ID, "purpose_ref": "purpose:ops"}
    assert "/record_id" not in omitted


def test_values_are_copied_not_shared() -> None:
    record = _record()
    redacted, _ = redact(record, [""], allow_derivation_lineage=False)
    redacted["trust"]["class"] = "signed"
    assert record["trust"]["class"] == "asserted"


def test_redacted_fields_sort_by_utf16_code_units() -> None:
    record = {"record_id": RECORD_ID, "\uff01": 1, "\U0001f600": 2, "b": 3}
    _, omitted = redact(record, [], allow_derivation_lineage=False)
    assert omitted == ["/b", "/\U0001f600", "/\uff01"]


@pytest.mark.parametrize("pointer", ["trust", "/~2", "/a~", "/~~01"])
def test_malformed_pointer_is_refused(pointer: str) -> None:
    with pytest.raises(ValueError, match="pointer"):
        redact(_record(), [pointer], allow_derivation_lineage=False)


def test_record_without_record_id_is_refused() -> None:
    with pytest.raises(ValueError, match="record_id"):
        redact({"trust": {}}, [""], allow_derivation_lineage=False)


def test_redaction_receipt_digest_uses_the_recall_redaction_domain() -> None:
    fields = ["/derivation", "/trust"]
    expected = domain_digest(
        "graphify-memory/recall-redaction/v1\0",
        {
            "record_id": RECORD_ID,
            "source_record_digest": "sha256:" + "1" * 64,
            "policy_version": "rev-7",
            "redacted_fields": fields,
        },
    )
    assert redaction_receipt_digest(RECORD_ID, "sha256:" + "1" * 64, "rev-7", fields) == expected
