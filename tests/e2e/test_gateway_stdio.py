"""The signing gateway in stdio (desktop) mode, driven as a stock MCP client drives it.

The real SDK client spawns `engram-memory gateway --config FILE`, which spawns the real
`engram-memory serve` over stdio (embedded policy, real DuckDB in a temporary directory).
The store's own audit, read offline afterwards, shows what really reached the upstream.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import MCPError, StdioServerParameters
from mcp.client.session import ClientRequestContext

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import Binding, connect
from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.gateway.audit_log import verify_audit
from engram_memory.host.confirmation import (
    CONFIRMATION_META_KEY,
    ConfirmationBinding,
    mint_confirmation,
)
from engram_memory.host.keys import HostSigningKey
from tests.e2e.gateway_support import (
    GATEWAY,
    PURPOSE,
    SERVE_STDIO,
    code,
    envelope,
    forget_arguments,
    gateway_client,
    get,
    key,
    os_user,
    remembered,
    value,
    write_setup,
)

pytestmark = pytest.mark.e2e

Secrets = tuple[Path, Path, Path]
FORGET = "engram_memory_forget"
CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"


async def _accept(
    _ctx: ClientRequestContext, _params: types.ElicitRequestParams
) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"confirm": True})


async def test_tools_list_through_the_gateway_equals_the_upstream_list_for_the_binding(
    tmp_path: Path, host_secrets: Secrets
) -> None:
    setup = write_setup(tmp_path, host_secrets)
    async with gateway_client(setup) as client:
        through_gateway = (await client.list_tools()).tools
    binding = Binding("acme", "support", "user:alice", PURPOSE, agent_id="agent:desktop")
    signer = HostSigningKey.from_pem_file(host_secrets[1])
    upstream = StdioServerParameters(command=SERVE_STDIO[0], args=SERVE_STDIO[1:], env=setup.env)
    async with connect(upstream, signer, binding) as host:
        direct = await host.list_tools()
    assert [tool.model_dump() for tool in through_gateway] == [tool.model_dump() for tool in direct]
    assert len(direct) == 6


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["handshake_era", "2026_era"])
async def test_a_governed_session_with_a_human_yes_and_replays_passing_through(
    tmp_path: Path, host_secrets: Secrets, mode: str
) -> None:
    setup = write_setup(tmp_path, host_secrets)
    shown: list[str] = []

    async def accept(
        ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        shown.append(params.message)
        return await _accept(ctx, params)

    async with gateway_client(setup, mode=mode, elicit=accept) as client:
        capture = demo_capture_arguments("Refund approved for parcel 7731.", key("cap"))
        first = value(await client.call_tool(CAPTURE, capture))
        again = value(await client.call_tool(CAPTURE, capture))
        assert (first["status"], again["status"]) == ("committed_pending", "duplicate_exact")
        assert again["candidate_id"] == first["candidate_id"]
        admission = {"candidate_id": first["candidate_id"], "idempotency_key": key("adm")}
        admitted = value(await client.call_tool(ADMIT, admission))
        replayed = value(await client.call_tool(ADMIT, admission))
        assert (admitted["replayed"], replayed["replayed"]) == (False, True)
        record_id = admitted["outcome"]["record_id"]
        found = value(
            await client.call_tool(
                "engram_memory_search", {"query": "parcel 7731", "purpose_ref": PURPOSE}
            )
        )
        assert [hit["record"]["record_id"] for hit in found["records"]] == [record_id]
        reads: list[str] = []

        async def read() -> None:
            reads.append(value(await get(client, record_id))["record"]["record_id"])

        async with anyio.create_task_group() as group:  # concurrent calls share one upstream
            for _ in range(6):
                group.start_soon(read)
        assert reads == [record_id] * 6
        arguments = forget_arguments(record_id)
        forgotten = value(await client.call_tool(FORGET, arguments))
        assert (forgotten["receipt"]["to_state"], forgotten["replayed"]) == ("tombstoned", False)
        assert code(await get(client, record_id)) == "NOT_FOUND"
        assert value(await client.call_tool(FORGET, arguments))["replayed"] is True
    digest = operation_digest(FORGET, normalize(arguments))  # type: ignore[arg-type]
    assert len(shown) == 2  # a replay needs a fresh confirmation too (SPEC §6)
    assert record_id in shown[0]
    assert digest in shown[0]
    confirmations = [e for e in setup.gateway_audit() if e["event"] == "confirmation"]
    assert [(e["reason"], e["target"], e["op_digest"]) for e in confirmations] == [
        ("accepted", record_id, digest)
    ] * 2
    # The human's yes reached the store's audit through the confirmation.
    assert (FORGET, "ok", f"human:{os_user()}") in setup.upstream_audit()


async def test_decline_cancel_timeout_error_and_a_forged_meta_confirmation_send_nothing_upstream(
    tmp_path: Path, host_secrets: Secrets
) -> None:
    setup = write_setup(tmp_path, host_secrets, confirmation_timeout_s=1)
    signer = HostSigningKey.from_pem_file(host_secrets[1])
    never = anyio.Event()
    answers = ["decline", "cancel", "false", "wait", "error", "decline"]

    async def answer(
        _ctx: ClientRequestContext, _params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        kind = answers.pop(0)
        if kind == "wait":
            await never.wait()  # the human never answers; the gateway's timeout must
        if kind == "false":
            return types.ElicitResult(action="accept", content={"confirm": False})
        if kind == "error":
            return types.ErrorData(code=types.INTERNAL_ERROR, message="no dialog available")
        return types.ElicitResult(action=kind)  # type: ignore[arg-type]

    async with gateway_client(setup, elicit=answer) as client:
        record_id = await remembered(client, "Escalation note for case 881.")
        refusals = [
            envelope(await client.call_tool(FORGET, forget_arguments(record_id))) for _ in range(5)
        ]
        # A validly signed confirmation for exactly this call, sent by the client: were it
        # forwarded, the upstream would forget the record. The gateway asks the human.
        arguments = forget_arguments(record_id)
        binding = ConfirmationBinding(
            FORGET,
            record_id,
            operation_digest(FORGET, normalize(arguments)),  # type: ignore[arg-type]
            setup.gateway_audit()[0]["session"],  # learnt from the first refusal
            "user:alice",
        )
        token = mint_confirmation(signer, binding, approver="human:mallory")
        forged: Any = {CONFIRMATION_META_KEY: token}
        refusals.append(envelope(await client.call_tool(FORGET, arguments, meta=forged)))
        assert value(await get(client, record_id))["record"]["record_id"] == record_id
    for refusal in refusals:
        assert refusal["error"]["code"] == "gate_failed"
        assert refusal["error"]["retriable"] is False
    reasons = [e["reason"] for e in setup.gateway_audit() if e["event"] == "confirmation"]
    assert reasons == [
        "declined",
        "cancelled",
        "declined",
        "timed_out",
        "elicitation_failed",
        "declined",
    ]
    assert [e["audit_id"] for e in setup.gateway_audit()] == [r["auditId"] for r in refusals]
    assert verify_audit(setup.audit_log) == 6
    assert all(tool != FORGET for tool, _outcome, _approver in setup.upstream_audit())


async def test_no_elicitation_capability_or_a_foreign_purpose_is_refused_and_nothing_is_sent(
    tmp_path: Path, host_secrets: Secrets
) -> None:
    setup = write_setup(tmp_path, host_secrets)
    async with gateway_client(setup, mode="auto") as client:
        record_id = await remembered(client, "A note no human confirmed forgetting.")
        assert code(await client.call_tool(FORGET, forget_arguments(record_id))) == "gate_failed"
        assert value(await get(client, record_id))["record"]["record_id"] == record_id
        with pytest.raises(MCPError) as caught:
            await client.call_tool(
                "engram_memory_search", {"query": "x", "purpose_ref": "purpose:marketing"}
            )
        assert caught.value.error.code == -32603
        other = demo_capture_arguments("Text.", key("cap"), purpose_ref="purpose:marketing")
        with pytest.raises(MCPError) as caught:
            await client.call_tool(CAPTURE, other)
        assert caught.value.error.code == -32603
    assert [(e["event"], e["reason"], e["tool"]) for e in setup.gateway_audit()] == [
        ("confirmation", "elicitation_unsupported", FORGET),
        ("caller_refused", "purpose_not_allowed", "engram_memory_search"),
        ("caller_refused", "purpose_not_allowed", CAPTURE),
    ]
    calls = [tool for tool, _outcome, _approver in setup.upstream_audit() if tool != "tools/list"]
    assert calls == [CAPTURE, ADMIT, "engram_memory_get"]


async def test_tools_the_policy_makes_confirmable_are_confirmed_when_configured(
    tmp_path: Path, host_secrets: Secrets
) -> None:
    """The shipped policy data requires a confirmation for dave's captures and admissions;
    listed in `confirmation.tools`, the gateway asks the human for them too."""
    setup = write_setup(
        tmp_path, host_secrets, principal="user:dave", confirmation_tools=(CAPTURE, ADMIT)
    )
    async with gateway_client(setup, mode="auto", elicit=_accept) as client:
        arguments = demo_capture_arguments("Dave's confirmed note.", key("cap"))
        captured = value(await client.call_tool(CAPTURE, arguments))
        admission = {"candidate_id": captured["candidate_id"], "idempotency_key": key("adm")}
        admitted = value(await client.call_tool(ADMIT, admission))
        assert admitted["outcome"]["status"] == "accepted"
    digest = operation_digest(CAPTURE, normalize(arguments))  # type: ignore[arg-type]
    confirmations = [(e["tool"], e["target"], e["reason"]) for e in setup.gateway_audit()]
    assert confirmations == [
        (CAPTURE, digest, "accepted"),  # a capture's target is its operation digest
        (ADMIT, captured["candidate_id"], "accepted"),
    ]
    approved = {(tool, approver) for tool, outcome, approver in setup.upstream_audit()}
    assert {(CAPTURE, f"human:{os_user()}"), (ADMIT, f"human:{os_user()}")} <= approved


def _gateway_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GATEWAY, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_another_os_user_is_refused_unless_the_configuration_allows_it(
    tmp_path: Path, host_secrets: Secrets
) -> None:
    refused = write_setup(tmp_path / "a", host_secrets, os_user="somebody-else")
    result = _gateway_run("--config", str(refused.config))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert not refused.audit_log.exists()
    allowed = write_setup(
        tmp_path / "b", host_secrets, os_user="somebody-else", allow_other_os_user=True
    )
    assert _gateway_run("--config", str(allowed.config), "--check").returncode == 0


def test_a_bad_configuration_exits_2_with_one_located_line_per_problem(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("mode: stdio\nhost_id: ''\nstdio: {tenant: '*'}\n", encoding="utf-8")
    result = _gateway_run("--config", str(config), "--check")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) >= 3
    assert all(line.startswith(f"{config}:") for line in lines)
    assert f"{config}:2: host_id: " in result.stderr
    assert f"{config}:3: stdio.tenant: " in result.stderr


def test_an_unreadable_signing_key_missing_upstream_program_or_unwritable_audit_log_exits_2(
    tmp_path: Path, host_secrets: Secrets
) -> None:
    setup = write_setup(tmp_path, host_secrets)
    no_key = setup.config.read_text(encoding="utf-8").replace(str(host_secrets[1]), "missing.pem")
    setup.config.write_text(no_key, encoding="utf-8")
    result = _gateway_run("--config", str(setup.config))
    assert (result.returncode, len(result.stderr.splitlines())) == (2, 1)
    setup = write_setup(tmp_path, host_secrets)
    no_program = setup.config.read_text(encoding="utf-8").replace(
        f"- {SERVE_STDIO[0]}", "- /nonexistent/engram-memory"
    )
    assert no_program != setup.config.read_text(encoding="utf-8")
    setup.config.write_text(no_program, encoding="utf-8")
    result = _gateway_run("--config", str(setup.config), "--check")
    assert (result.returncode, len(result.stderr.splitlines())) == (2, 1)
    setup = write_setup(tmp_path, host_secrets)
    # A missing directory is made at start; one under a regular file cannot be.
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    no_log = setup.config.read_text(encoding="utf-8").replace(
        "gateway-audit.jsonl", f"{tmp_path}/a-file/gateway-audit.jsonl"
    )
    setup.config.write_text(no_log, encoding="utf-8")
    result = _gateway_run("--config", str(setup.config))
    assert (result.returncode, len(result.stderr.splitlines())) == (2, 1)
