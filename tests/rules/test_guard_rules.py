"""Issue 3, rule 4 — the tombstoned-content guard (SPEC §4.4 rule 4).

Also proven in tests/tools/test_tool_rules.py (see tests/RULES.md): forgotten content that
the policy rejects stays rejected; the original capture key after a forget replays.
"""

from __future__ import annotations

import copy
from typing import Any

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.digests import digest
from engram_memory.core.runtime import Services
from tests.harness import Caller, fresh_key, ok_value
from tests.rules.steps import CAPTURE, SCOPE
from tests.tools.test_tool_rules import admit, capture, forget, high_water


def _forgotten(alice: Caller, text: str) -> dict[str, Any]:
    """Capture, accept and forget `text`; return the original capture arguments."""
    args = demo_capture_arguments(text, fresh_key("orig"))
    candidate_id = ok_value(alice.call(CAPTURE, args))["candidate_id"]
    record_id = ok_value(admit(alice, candidate_id))["outcome"]["record_id"]
    ok_value(forget(alice, record_id))
    return args


def _candidate_state(services: Services, candidate_id: str) -> str:
    with services.database.transaction() as tx:
        row = tx.fetchone(
            "SELECT state FROM candidates WHERE scope_ref = ? AND candidate_id = ?",
            [SCOPE, candidate_id],
        )
    assert row is not None
    return str(row[0])


def test_guard_holds_recaptured_forgotten_content_exactly_like_an_adjudication(
    alice: Caller, services: Services
) -> None:
    args = _forgotten(alice, "Forgotten content, proposed again.")
    again = ok_value(alice.call(CAPTURE, {**args, "idempotency_key": fresh_key("again")}))
    cursor = high_water(services)

    held = ok_value(admit(alice, again["candidate_id"]))
    outcome = held["outcome"]
    assert (held["replayed"], outcome["status"]) == (False, "pending_adjudication")
    # Nothing is written; the cursor is the capture's; the receipt is the adjudication one.
    assert high_water(services) == cursor
    assert outcome["cursor"] == again["cursor"]
    assert outcome["transaction_receipt_digest"] == digest(
        "admission-pending",
        {
            "candidate_id": again["candidate_id"],
            "cursor": again["cursor"],
            "decision_receipt_digest": outcome["decision_receipt_digest"],
        },
    )
    assert _candidate_state(services, again["candidate_id"]) == "pending"
    assert services.keys.get(SCOPE, again["candidate_id"]) is not None  # key kept for a human

    # Indistinguishable in shape from a genuine adjudication_required decision.
    genuine = capture(alice, "Needs a human look.", evidence_ref="evidence:email/3")
    adjudicated = ok_value(admit(alice, genuine["candidate_id"]))["outcome"]
    assert adjudicated["status"] == outcome["status"]
    assert set(adjudicated) == set(outcome)


def test_guard_ignores_retention_and_reconciliation(alice: Caller) -> None:
    args = _forgotten(alice, "Forgotten, then re-sent with other retention.")
    other = copy.deepcopy(args)
    other["idempotency_key"] = fresh_key("other")
    other["payload"]["retention"] = {"derivative_rule": "retain"}  # alice may retain
    other["payload"]["reconciliation"] = {"family_refs": ["family:support-case-notes"]}
    candidate_id = ok_value(alice.call(CAPTURE, other))["candidate_id"]
    outcome = ok_value(admit(alice, candidate_id))["outcome"]
    assert outcome["status"] == "pending_adjudication"
    assert "record_id" not in outcome


def test_guard_applies_within_the_same_scope_only(alice: Caller) -> None:
    args = _forgotten(alice, "Forgotten in acme, new to globex.")
    carol = alice.as_(tenant="globex", workspace="main", principal="user:carol")
    candidate_id = ok_value(carol.call(CAPTURE, {**args, "idempotency_key": fresh_key()}))[
        "candidate_id"
    ]
    assert ok_value(admit(carol, candidate_id))["outcome"]["status"] == "accepted"
