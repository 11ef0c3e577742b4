"""Four-eyes confirmations end to end (issue 22 item 2): the shipped acme `records` workspace
lets a forget through only when the approving human is not the requester and the host
asserts them in `group:records-officers`. A refused approval is `gate_failed`, changes
nothing, spends no confirmation, and its audit entry names the rule that refused it and
binds the approval decision's receipt. Real server, real MCP SDK client, real OPA server
and the embedded Wasm engine, real DuckDB file."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import duckdb
import pytest

from engram_memory.client.reference_host import ReferenceHost
from engram_memory.store.connection import DATABASE_FILE
from tests.e2e.conftest import ALICE, Deployment
from tests.e2e.test_governed_session import _admit, _capture, _code, _get, _value

pytestmark = pytest.mark.e2e

FORGET = "engram_memory_forget"
OFFICERS = ["group:records-officers"]
KIM = replace(
    ALICE,
    workspace="records",
    principal="user:kim",
    groups=("group:records-clerks",),
)


def _forget_args(record_id: str) -> dict[str, Any]:
    key = f"fgt-{uuid.uuid4().hex}"
    return {"record_id": record_id, "idempotency_key": key, "reason_ref": "reason:request"}


async def _forget(
    host: ReferenceHost, record_id: str, approver: str, groups: list[str] | None
) -> tuple[dict[str, Any], str]:
    args = _forget_args(record_id)
    token = host.confirmation_for(FORGET, args, record_id, approver, approver_groups=groups)
    outcome = await host.call(FORGET, args, confirmation=token)
    return outcome.envelope, args["idempotency_key"]


@pytest.mark.parametrize("deployment", ["http-opa", "stdio-embedded"], indirect=True)
async def test_a_forget_needs_a_second_person_who_is_a_records_officer(
    deployment: Deployment,
) -> None:
    async with deployment.host(KIM) as kim:
        captured = await _capture(kim, f"Customer file {uuid.uuid4().hex} closed.")
        record_id = (await _admit(kim, captured["candidate_id"]))["outcome"]["record_id"]

        refusals = [
            ("human:kim", OFFICERS, "approver-is-not-requester"),  # self-approval
            ("human:lee", ["group:records-clerks"], "approver-is-records-officer"),
            ("human:lee", None, "approver-is-records-officer"),  # host asserts no groups
        ]
        for approver, groups, _rule in refusals:
            envelope, _ = await _forget(kim, record_id, approver, groups)
            assert envelope["ok"] is False
            assert envelope["error"]["code"] == "gate_failed"
            # Nothing changed: the record is still readable.
            assert _value(await _get(kim, record_id))["record"]["record_id"] == record_id

        envelope, _ = await _forget(kim, record_id, "human:olga", OFFICERS)
        assert envelope["ok"] is True, envelope
        assert envelope["output"]["value"]["receipt"]["to_state"] == "tombstoned"
        assert _code(await _get(kim, record_id)) == "NOT_FOUND"
    deployment.stop()

    with duckdb.connect(str(deployment.data_dir / DATABASE_FILE), read_only=True) as con:
        entries = con.execute(
            "SELECT outcome, detail, approver, receipt_digests_json FROM audit_entries"
            " WHERE tool = ? ORDER BY sequence",
            [FORGET],
        ).fetchall()
        receipts = dict(
            con.execute("SELECT receipt_digest, reasons_json FROM decision_receipts").fetchall()
        )
    assert [(outcome, detail) for outcome, detail, _, _ in entries] == [
        *(("gate_failed", f"approval refused by rule {rule}") for _, _, rule in refusals),
        ("ok", ""),
    ]
    # Only the approved confirmation was spent, and it names its approver.
    assert [approver for _, _, approver, _ in entries] == [None, None, None, "human:olga"]
    for _, _, _, digests in entries:
        # Each entry binds both confirmation decisions: the requirement and the approval.
        reasons = [json.loads(receipts[d]) for d in json.loads(digests)]
        assert reasons.count(["always_required"]) == 2
