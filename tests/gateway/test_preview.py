"""The summary of a redacted record shows only what the store's redacted view holds."""

from __future__ import annotations

from engram_memory.gateway.preview import ONLY_ITS_ID, record_summary

RECORD_ID = "mem_" + "a" * 52
FULL = {
    "record_id": RECORD_ID,
    "primary_component_id": "c2",
    "components": [
        {"component_id": "c1", "kind": "context", "text": "Context text"},
        {"component_id": "c2", "kind": "decision", "text": "Refund approved"},
    ],
    "recorded_at": "2026-12-07T10:00:00.000Z",
    "evidence": {"evidence_ref": "ev:private-note"},
}


def test_a_full_view_shows_the_primary_text_the_count_and_when() -> None:
    shown = record_summary(FULL, [])
    assert 'Its decision reads: "Refund approved"' in shown
    assert "1 more component" in shown
    assert "2026-12-07T10:00:00.000Z" in shown
    assert "Context text" not in shown  # only the primary component's text
    assert "ev:private-note" not in shown  # fields the summary never shows


def test_a_view_without_components_shows_no_text_and_names_what_was_withheld() -> None:
    redacted = {"record_id": RECORD_ID, "recorded_at": "2026-12-07T10:00:00.000Z"}
    shown = record_summary(redacted, ["/components", "/evidence"])
    assert "reads" not in shown
    assert "Withheld from you by policy: /components, /evidence." in shown


def test_a_view_holding_only_the_id_says_policy_shows_nothing_more() -> None:
    assert record_summary({"record_id": RECORD_ID}, ["/components"]) == ONLY_ITS_ID
