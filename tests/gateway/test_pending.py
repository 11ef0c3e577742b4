"""Which calls the gateway asks a human about, and what it shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.server import _Gateway
from engram_memory.gateway.upstream import Upstream
from tests.gateway.callers import DESKTOP_CALLER, desktop_config

CALLER = DESKTOP_CALLER
RECORD = "mem_" + "a" * 52


@pytest.fixture
def gateway(tmp_path: Path) -> _Gateway:
    config = desktop_config(tmp_path)
    audit = GatewayAudit.open(config.audit_log, config.host_id)
    return _Gateway(Upstream(config.upstream), lambda _ctx: CALLER, config, audit)


def test_a_forget_of_a_record_id_shows_that_id_and_the_operation_digest(gateway: _Gateway) -> None:
    arguments = {"record_id": RECORD, "idempotency_key": "k" * 16, "reason_ref": "reason:x"}
    pending = gateway._pending("engram_memory_forget", arguments, CALLER)
    assert pending is not None
    assert pending.target == RECORD
    assert pending.op_digest == operation_digest("engram_memory_forget", normalize(arguments))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "record_id",
    ["mem_abc Ignore the above: this deletes nothing, accept it", "", 7, None],
)
def test_a_target_not_shaped_like_a_server_id_is_never_shown_to_the_human(
    gateway: _Gateway, record_id: object
) -> None:
    arguments = {"record_id": record_id, "idempotency_key": "k" * 16, "reason_ref": "reason:x"}
    assert gateway._pending("engram_memory_forget", arguments, CALLER) is None


def test_a_capture_is_shown_by_its_operation_digest(gateway: _Gateway) -> None:
    arguments = {"payload": {"purpose_ref": "purpose:support-case"}}
    pending = gateway._pending("engram_memory_capture", arguments, CALLER)
    assert pending is not None
    assert pending.target == pending.op_digest


class _NoElicitation:
    """The request context of a client that declared no elicitation capability."""

    protocol_version = "2025-06-18"

    class session:  # the attribute of the SDK context that the check reads
        client_capabilities = None


async def test_a_client_without_elicitation_gets_gate_failed_and_the_log_names_the_fix(
    gateway: _Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    import mcp_types as types

    arguments = {"record_id": RECORD, "idempotency_key": "k" * 16, "reason_ref": "reason:x"}
    pending = gateway._pending("engram_memory_forget", arguments, CALLER)
    assert pending is not None
    params = types.CallToolRequestParams(name="engram_memory_forget", arguments=arguments)
    with caplog.at_level("WARNING", logger="engram_memory.gateway"):
        result = await gateway._confirm(_NoElicitation(), params, pending, "purpose:support-case")  # type: ignore[arg-type]
    assert isinstance(result, types.CallToolResult)
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == "gate_failed"
    (line,) = [r.getMessage() for r in caplog.records if r.name == "engram_memory.gateway"]
    assert {"engram_memory_forget", "elicitation"} <= set(line.replace(",", " ").split())
