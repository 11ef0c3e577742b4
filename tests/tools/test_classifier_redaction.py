"""Classifier names in the redaction of search and get (issue 22 item 1), in-process with
the shipped bundle: in acme/accounts a support advisor reads a record the `customer`
classifier matches without its components and citations, a record without a match in
full; a records officer reads both in full. The policy is asked once per distinct set of
names in a call, and each decision (with its rule) is in the call's audit entry."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from engram_memory.admin.maintenance import MaintenanceService, Operator
from engram_memory.contract.exceptions import PolicyUnavailable
from engram_memory.core.runtime import Services
from engram_memory.policy.decider import AUTHZ_PATH, PolicyDecider
from engram_memory.policy.engine import EngineAnswer
from tests.harness import Caller
from tests.tools.test_tool_rules import admit, capture, code, value

DANA = Operator("acme", "accounts", "human:dana")
ADVISORS = ["group:support-advisors"]
OFFICERS = ["group:records-officers"]
SEARCH = "engram_memory_search"
GET = "engram_memory_get"
CUSTOMER_ONLY_FIELDS = {"/citations", "/components"}


def _accepted(caller: Caller, services: Services, text: str) -> str:
    """A record of `text` in accounts; one naming a customer is held, so Dana accepts it."""
    candidate_id = capture(caller, text)["candidate_id"]
    outcome = value(admit(caller, candidate_id))["outcome"]
    if outcome["status"] == "accepted":
        return str(outcome["record_id"])
    assert outcome["status"] == "pending_adjudication"
    adjudicated = MaintenanceService(services).adjudicate(DANA, candidate_id, "accept", "r:x")
    return str(adjudicated["record_id"])


@pytest.fixture
def accounts(alice: Caller, services: Services) -> dict[str, Any]:
    manager = replace(alice, workspace="accounts")
    return {
        "reader": manager.as_(principal="user:zoe"),
        "customer": _accepted(manager, services, "Parcel refund: the customer called twice."),
        "customer2": _accepted(manager, services, "Parcel refund: the client wrote again."),
        "plain": _accepted(manager, services, "Parcel refund: the depot lost the box."),
    }


def _get(reader: Caller, record_id: str, groups: list[str]) -> dict[str, Any]:
    args = {"record_id": record_id, "purpose_ref": reader.purpose_ref}
    return value(reader.call(GET, args, groups=groups))


def _search(reader: Caller, query: str, groups: list[str]) -> dict[str, Any]:
    args = {"query": query, "purpose_ref": reader.purpose_ref}
    return value(reader.call(SEARCH, args, groups=groups))


def _last_authz_reasons(services: Services, tool: str) -> list[list[str]]:
    """The reasons of each authz decision of the last `tool` call's audit entry, in order."""
    with services.database.reading() as tx:
        rows = tx.fetchall(
            "SELECT receipt_digests_json FROM audit_entries WHERE tool = ? "
            "ORDER BY sequence DESC LIMIT 1",
            [tool],
        )
        receipts = json.loads(rows[0][0])
        decided = {
            str(d): (str(p), json.loads(r))
            for d, p, r in tx.fetchall(
                "SELECT receipt_digest, policy_path, reasons_json FROM decision_receipts"
            )
        }
    return [decided[r][1] for r in receipts if decided[r][0].startswith("engram/authz")]


def test_get_omits_components_of_a_customer_record_for_an_advisor_only(
    accounts: dict[str, Any],
) -> None:
    reader = accounts["reader"]
    held = _get(reader, accounts["customer"], ADVISORS)
    plain = _get(reader, accounts["plain"], ADVISORS)
    assert set(held["redacted_fields"]) >= CUSTOMER_ONLY_FIELDS
    assert "components" not in held["record"]
    assert "/record_digest" not in held["redacted_fields"]
    assert not CUSTOMER_ONLY_FIELDS & set(plain["redacted_fields"])
    assert plain["record"]["components"]
    officer = _get(reader, accounts["customer"], OFFICERS)
    assert not CUSTOMER_ONLY_FIELDS & set(officer["redacted_fields"])
    # The read receipt binds the decision that applied: the one for the record's names.
    assert (
        held["read_receipt"]["authorization_receipt_digest"]
        != plain["read_receipt"]["authorization_receipt_digest"]
    )


def test_get_audits_the_decision_for_the_names_with_its_rule(
    accounts: dict[str, Any], services: Services
) -> None:
    reader = accounts["reader"]
    _get(reader, accounts["customer"], ADVISORS)
    first, second = _last_authz_reasons(services, GET)
    assert "redaction_rule:account-reader-view" in first
    assert "redaction_rule:customer-record-reader-view" in second
    _get(reader, accounts["plain"], ADVISORS)
    (only,) = _last_authz_reasons(services, GET)
    assert "redaction_rule:account-reader-view" in only


def test_search_asks_once_per_distinct_set_of_names_in_the_page(
    accounts: dict[str, Any], services: Services
) -> None:
    reader = accounts["reader"]
    page = _search(reader, "parcel refund", ADVISORS)
    by_id = {p["record"]["record_id"]: p for p in page["records"]}
    assert set(by_id) == {accounts["customer"], accounts["customer2"], accounts["plain"]}
    for name in ("customer", "customer2"):
        assert set(by_id[accounts[name]]["redacted_fields"]) >= CUSTOMER_ONLY_FIELDS
    assert not CUSTOMER_ONLY_FIELDS & set(by_id[accounts["plain"]]["redacted_fields"])
    # Two records matched the same names: the call decided twice, not three times.
    reasons = _last_authz_reasons(services, SEARCH)
    assert len(reasons) == 2
    assert "redaction_rule:customer-record-reader-view" in reasons[1]


def test_a_page_without_a_match_costs_the_single_decision_it_always_did(
    accounts: dict[str, Any], services: Services
) -> None:
    page = _search(accounts["reader"], "depot lost box", ADVISORS)
    assert [p["record"]["record_id"] for p in page["records"]] == [accounts["plain"]]
    assert len(_last_authz_reasons(services, SEARCH)) == 1


def test_an_officer_reads_customer_records_in_full_in_a_search(
    accounts: dict[str, Any], services: Services
) -> None:
    page = _search(accounts["reader"], "parcel refund", OFFICERS)
    assert all(not CUSTOMER_ONLY_FIELDS & set(p["redacted_fields"]) for p in page["records"])
    reasons = _last_authz_reasons(services, SEARCH)
    assert all("redaction_rule:records-officer-view" in r for r in reasons)


class _NoAnswerForNames:
    """The real engine, except that an authorization asked with names finds no policy."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.engine_id = real.engine_id
        self.engine_version = real.engine_version

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        if path == AUTHZ_PATH and policy_input.get("classifiers"):
            raise PolicyUnavailable("no answer")
        answer: EngineAnswer = self.real.evaluate(path, policy_input)
        return answer

    def close(self) -> None:
        return None


def test_a_record_whose_redaction_cannot_be_decided_is_never_returned(
    accounts: dict[str, Any], services: Services, engine: Any
) -> None:
    real = services.decider
    services.decider = PolicyDecider(_NoAnswerForNames(engine), real.expected, services.clock_ms)
    reader = accounts["reader"]
    get = {"record_id": accounts["customer"], "purpose_ref": reader.purpose_ref}
    assert code(reader.call(GET, get, groups=ADVISORS)) == "POLICY_UNAVAILABLE"
    search = {"query": "parcel refund", "purpose_ref": reader.purpose_ref}
    assert code(reader.call(SEARCH, search, groups=ADVISORS)) == "POLICY_UNAVAILABLE"
    # A record nothing matched needs no second decision: it is still served.
    assert _get(reader, accounts["plain"], ADVISORS)["record"]["components"]


def test_the_kept_inputs_of_a_get_show_the_names_each_redaction_decision_saw(
    accounts: dict[str, Any], services: Services
) -> None:
    _get(accounts["reader"], accounts["customer"], ADVISORS)
    with services.database.reading() as tx:
        (receipts,) = tx.fetchall(
            "SELECT receipt_digests_json FROM audit_entries WHERE tool = ? "
            "ORDER BY sequence DESC LIMIT 1",
            [GET],
        )[0]
        kept = tx.fetchall(
            "SELECT r.receipt_digest, i.input_json FROM decision_receipts r "
            "JOIN decision_inputs i ON i.decision_id = r.decision_id "
            "WHERE r.policy_path = 'engram/authz/decision'"
        )
    inputs = dict(kept)
    seen = [json.loads(inputs[r])["classifiers"] for r in json.loads(receipts) if r in inputs]
    assert seen[0] == {}
    assert {name for names in seen[1].values() for name in names} == {"customer"}
