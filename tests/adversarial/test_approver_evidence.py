"""Issue 9 item 4, attacked through the real server over stdio and streamable HTTP: a host
confirmation whose approver does not name a human (blank, padded, not `human:`) is
`gate_failed` and changes nothing; the forget a human did approve carries that human, the
confirmation's jti, iat, resolved_at and operation digest in its audit entry and journal
event, and `audit verify` (the CLI) accepts the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_memory.client.reference_host import ConfirmationPrompt
from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from tests.adversarial.evidence_support import (
    SCOPE,
    accepted,
    code,
    forget_args,
    real_server,
    value,
)

FORGET = "engram_memory_forget"
NOT_A_HUMAN = ["human: ", "human:", " human:x", "human:x ", "robot:x"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_only_a_named_human_releases_a_forget_and_is_recorded_as_its_approver(
    transport: str, tmp_path: Path
) -> None:
    with real_server(transport, tmp_path) as server:
        async with server.host() as host:
            record_id = await accepted(host, "Courier refund for the lost parcel.")
            for approver in NOT_A_HUMAN:
                args = forget_args(record_id)
                token = host.confirmation_for(FORGET, args, record_id, approver)
                refused = await host.call(FORGET, args, confirmation=token)
                assert code(refused) == "gate_failed", approver
                # Nothing changed: the legitimate reader still gets the record.
                read = {"record_id": record_id, "purpose_ref": host.binding.purpose_ref}
                assert value(await host.call("engram_memory_get", read))["record"]
            approved = forget_args(record_id)

            async def dana(prompt: ConfirmationPrompt) -> str:
                assert prompt.target == record_id
                return "human:dana"

            outcome = await host.call_confirmed(FORGET, approved, record_id, dana)
            assert outcome is not None
            assert value(outcome)["receipt"]["to_state"] == "tombstoned"
        server.stop()

    entries = server.rows(
        "SELECT outcome, approver, confirmation_jti, confirmation_issued_at, "
        "confirmation_resolved_at, confirmation_op_digest FROM audit_entries "
        "WHERE tool = ? ORDER BY sequence",
        [FORGET],
    )
    assert [row[:2] for row in entries] == [("gate_failed", None)] * len(NOT_A_HUMAN) + [
        ("ok", "human:dana")
    ]
    _, approver, jti, issued_at, resolved_at, op = entries[-1]
    assert jti
    assert issued_at <= resolved_at
    assert op == operation_digest(FORGET, normalize(approved))
    (event,) = server.rows(
        "SELECT event_json FROM journal_events WHERE scope_ref = ? AND operation = 'tombstone'",
        [SCOPE],
    )
    assert json.loads(event[0])["approval"] == {
        "approver": approver,
        "jti": jti,
        "issued_at": issued_at,
        "resolved_at": resolved_at,
        "op_digest": op,
    }
    # The refused confirmations were not spent: only the approved one was.
    assert server.rows("SELECT jti FROM consumed_confirmations") == [(jti,)]
    verified = server.audit_verify()
    assert verified.returncode == 0, verified.stdout
