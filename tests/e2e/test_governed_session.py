"""The six tools end to end, through the SDK client, on every deployment of conftest."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import MCPError

from engram_memory.admin.verification import verify_data_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import CallOutcome, ReferenceHost
from engram_memory.host.context import mint_invocation
from engram_memory.host.keys import HostSigningKey
from tests.e2e.conftest import ALICE, CAROL, Deployment

pytestmark = pytest.mark.e2e

APPROVER = "human:test-operator"


def _key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


def _value(outcome: CallOutcome) -> dict[str, Any]:
    assert outcome.envelope["ok"] is True, outcome.envelope
    assert outcome.is_error is False
    value: dict[str, Any] = outcome.envelope["output"]["value"]
    return value


def _code(outcome: CallOutcome) -> str:
    assert outcome.envelope["ok"] is False
    assert outcome.is_error is True
    code: str = outcome.envelope["error"]["code"]
    return code


async def _capture(host: ReferenceHost, text: str, **kwargs: Any) -> dict[str, Any]:
    return _value(
        await host.call(
            "engram_memory_capture", demo_capture_arguments(text, _key("cap"), **kwargs)
        )
    )


async def _admit(host: ReferenceHost, candidate_id: str) -> dict[str, Any]:
    args = {"candidate_id": candidate_id, "idempotency_key": _key("adm")}
    return _value(await host.call("engram_memory_request_admission", args))


async def _search(host: ReferenceHost, query: str) -> list[dict[str, Any]]:
    args = {"query": query, "purpose_ref": host.binding.purpose_ref}
    records: list[dict[str, Any]] = _value(await host.call("engram_memory_search", args))["records"]
    return records


async def _get(host: ReferenceHost, record_id: str) -> CallOutcome:
    return await host.call(
        "engram_memory_get", {"record_id": record_id, "purpose_ref": host.binding.purpose_ref}
    )


async def _forget(host: ReferenceHost, record_id: str) -> CallOutcome:
    args = {"record_id": record_id, "idempotency_key": _key("fgt"), "reason_ref": "reason:request"}
    token = host.confirmation_for("engram_memory_forget", args, record_id, APPROVER)
    return await host.call("engram_memory_forget", args, confirmation=token)


def _assert_no_plaintext(data_dir: Path, canary: str) -> None:
    needle = canary.encode("utf-8")
    for path in data_dir.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), f"plaintext found in {path.name}"


async def test_capture_admit_search_get_forget_leaves_nothing_readable(
    deployment: Deployment,
) -> None:
    canary = f"canary{uuid.uuid4().hex}"
    async with deployment.host() as host:
        listed = {tool.name for tool in await host.list_tools()}
        assert "engram_memory_forget" in listed

        captured = await _capture(host, f"Refund approved for parcel {canary} after courier loss.")
        assert captured["status"] == "committed_pending"
        assert await _search(host, canary) == []  # pending content is not searchable

        outcome = (await _admit(host, captured["candidate_id"]))["outcome"]
        assert outcome["status"] == "accepted"
        record_id = outcome["record_id"]
        assert record_id.startswith("mem_")
        assert len(record_id) == 56

        found = await _search(host, canary)
        assert [r["record"]["record_id"] for r in found] == [record_id]
        read = _value(await _get(host, record_id))
        assert read["record"]["record_id"] == record_id
        assert read["read_receipt"]["record_digest"] == captured["record_digest"]

        forgotten = _value(await _forget(host, record_id))
        assert forgotten["receipt"]["to_state"] == "tombstoned"
        assert forgotten["projection_invalidation"] == "complete"
        assert _code(await _get(host, record_id)) == "NOT_FOUND"
        assert await _search(host, canary) == []
    deployment.stop()
    _assert_no_plaintext(deployment.data_dir, canary)
    events, entries, receipts = verify_data_dir(deployment.data_dir)
    assert events == 3  # capture, accept, tombstone
    # One per tool call, reads and refusals included, and one for the host's tools/list.
    assert entries == 9
    # At least discovery + authorization for each call, discovery for the listing.
    assert receipts >= 2 * (entries - 1) + 1


async def test_untrusted_evidence_is_rejected_by_admission_policy(deployment: Deployment) -> None:
    async with deployment.host() as host:
        captured = await _capture(host, "Unverified claim.", evidence_ref="evidence:untrusted/x")
        outcome = (await _admit(host, captured["candidate_id"]))["outcome"]
        assert outcome["status"] == "rejected"
        assert "record_id" not in outcome


async def test_pending_adjudication_candidate_can_be_withdrawn_with_confirmation(
    deployment: Deployment,
) -> None:
    async with deployment.host() as host:
        captured = await _capture(host, "Needs a human look.", evidence_ref="evidence:review/y")
        outcome = (await _admit(host, captured["candidate_id"]))["outcome"]
        assert outcome["status"] == "pending_adjudication"
        args = {
            "candidate_id": captured["candidate_id"],
            "idempotency_key": _key("wd"),
            "reason_ref": "reason:dup",
        }
        token = host.confirmation_for(
            "engram_memory_withdraw", args, captured["candidate_id"], APPROVER
        )
        withdrawn = _value(await host.call("engram_memory_withdraw", args, confirmation=token))
        assert withdrawn["receipt"]["to_state"] == "withdrawn"
        assert withdrawn["key_destruction"] == "complete"
        again = await host.call(
            "engram_memory_request_admission",
            {"candidate_id": captured["candidate_id"], "idempotency_key": _key("adm")},
        )
        assert _code(again) == "NOT_FOUND"


async def test_replayed_capture_is_duplicate_exact_and_other_content_conflicts(
    deployment: Deployment,
) -> None:
    async with deployment.host() as host:
        key = _key("same")
        arguments = demo_capture_arguments("First text.", key)
        first = _value(await host.call("engram_memory_capture", arguments))
        replay = _value(await host.call("engram_memory_capture", arguments))
        assert replay["status"] == "duplicate_exact"
        assert {k: v for k, v in replay.items() if k != "status"} == {
            k: v for k, v in first.items() if k != "status"
        }
        conflict = await host.call(
            "engram_memory_capture", demo_capture_arguments("Other text.", key)
        )
        assert _code(conflict) == "DIGEST_CONFLICT"


async def test_another_tenant_cannot_see_or_touch_records_or_candidates(
    deployment: Deployment,
) -> None:
    async with deployment.host() as alice:
        pending = await _capture(
            alice, "Alice pending secret-free note.", evidence_ref="evidence:review/z"
        )
        _ = await _admit(alice, pending["candidate_id"])
        accepted = await _capture(alice, "Alice accepted note about invoices.")
        record_id = (await _admit(alice, accepted["candidate_id"]))["outcome"]["record_id"]
        carol = alice.rebind(
            tenant=CAROL.tenant,
            workspace=CAROL.workspace,
            principal=CAROL.principal,
            purpose_ref=CAROL.purpose_ref,
        )
        unknown_record = "mem_" + "a" * 52
        assert _code(await _get(carol, record_id)) == "NOT_FOUND"
        assert _code(await _get(carol, unknown_record)) == "NOT_FOUND"
        foreign = await carol.call(
            "engram_memory_request_admission",
            {"candidate_id": pending["candidate_id"], "idempotency_key": _key("x")},
        )
        unknown = await carol.call(
            "engram_memory_request_admission",
            {"candidate_id": "candidate_" + "0" * 64, "idempotency_key": _key("x")},
        )
        assert foreign.envelope["error"] == unknown.envelope["error"]
        assert _code(foreign) == "NOT_FOUND"
        assert _code(await _forget(carol, record_id)) == "NOT_FOUND"
        assert await _search(carol, "invoices") == []
        assert len(await _search(alice, "invoices")) == 1


async def test_unknown_and_undiscoverable_tools_are_unknown_tool_errors(
    deployment: Deployment,
) -> None:
    async with deployment.host() as host:
        with pytest.raises(MCPError) as unknown:
            await host.call("engram_memory_rewind", {})
        assert unknown.value.code == -32602
        bob = host.rebind(principal="user:bob")
        visible = {tool.name for tool in await bob.list_tools()}
        assert "engram_memory_forget" not in visible
        with pytest.raises(MCPError) as hidden:
            await _forget(bob, "mem_" + "b" * 52)
        assert hidden.value.code == -32602
        assert hidden.value.message == unknown.value.message


async def test_missing_forged_or_expired_context_and_purpose_mismatch_are_refused(
    deployment: Deployment,
) -> None:
    args = {"query": "anything", "purpose_ref": ALICE.purpose_ref}
    forger = HostSigningKey.generate()
    async with deployment.host() as host:
        forged = ReferenceHost(host.client, forger, host.binding)
        expired_token = mint_invocation(
            host.signer,
            host_id="h",
            tenant="acme",
            workspace="support",
            principal="user:alice",
            agent_id="a",
            session="s",
            purpose_ref=ALICE.purpose_ref,
            audit_id="x",
            now_s=1_000_000,
        )
        attempts = [
            host.call("engram_memory_search", args, meta={}),
            forged.call("engram_memory_search", args),
            host.call(
                "engram_memory_search", args, meta={"engram-memory/invocation": expired_token}
            ),
            host.call("engram_memory_search", {**args, "purpose_ref": "purpose:marketing"}),
        ]
        for attempt in attempts:
            with pytest.raises(MCPError) as refused:
                await attempt
            assert refused.value.code == -32603
            assert refused.value.data is None


async def test_extra_argument_is_invalid_schema_and_writes_nothing(deployment: Deployment) -> None:
    async with deployment.host() as host:
        args = demo_capture_arguments("Never stored.", _key("extra"))
        refused = await host.call("engram_memory_capture", {**args, "confirmed": True})
        assert _code(refused) == "INVALID_SCHEMA"
        # The journal is still empty: the next capture gets the first cursor.
        accepted = _value(await host.call("engram_memory_capture", args))
        assert accepted["cursor"] == "1"


async def test_forget_without_confirmation_is_refused_at_protocol_level(
    deployment: Deployment,
) -> None:
    async with deployment.host() as host:
        args = {
            "record_id": "mem_" + "c" * 52,
            "idempotency_key": _key("nc"),
            "reason_ref": "reason:r",
        }
        with pytest.raises(MCPError) as refused:
            await host.call("engram_memory_forget", args)
        assert refused.value.code == -32603


async def test_both_protocol_eras_serve_the_same_tools(deployment: Deployment) -> None:
    names = []
    for mode in ("legacy", "2026-07-28"):
        async with deployment.host(mode=mode) as host:
            names.append(sorted(tool.name for tool in await host.list_tools()))
            assert host.client.protocol_version == (
                "2025-11-25" if mode == "legacy" else "2026-07-28"
            )
    assert names[0] == names[1]
    assert len(names[0]) == 6


@pytest.mark.parametrize("deployment", ["http-embedded", "http-opa"], indirect=True)
async def test_concurrent_http_clients_share_one_store_with_dense_cursors(
    deployment: Deployment,
) -> None:
    cursors: list[int] = []

    async def client(label: str) -> None:
        async with deployment.host() as host:
            for i in range(4):
                args = demo_capture_arguments(f"{label} note {i}", _key(label))
                cursors.append(
                    int(_value(await host.call("engram_memory_capture", args))["cursor"])
                )

    async with anyio.create_task_group() as group:
        for label in ("one", "two", "three"):
            group.start_soon(client, label)
    assert sorted(cursors) == list(range(1, 13))
