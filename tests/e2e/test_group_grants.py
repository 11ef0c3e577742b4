"""A grant by group, end to end: the shipped acme tenant grants `group:support-advisors` the
reader role for `purpose:support-case`; user:zoe has no grant of her own."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from mcp import MCPError

from engram_memory.client.reference_host import ReferenceHost
from tests.e2e.conftest import ALICE, Deployment
from tests.e2e.test_governed_session import _admit, _capture, _get, _search, _value

pytestmark = pytest.mark.e2e

ZOE = replace(ALICE, principal="user:zoe", groups=("group:support-advisors",))
READER_TOOLS = {"engram_memory_get", "engram_memory_search"}
# The protocol-level refusal of a tool the caller cannot discover (SPEC: unknown tool).
UNDISCOVERABLE = -32602
# The refusal of an invalid invocation context.
INVALID_CONTEXT = -32603


async def _refused_code(host: ReferenceHost, record_id: str, **meta_overrides: object) -> int:
    meta = host.invocation_meta(**meta_overrides) if meta_overrides else None
    args = {"record_id": record_id, "purpose_ref": host.binding.purpose_ref}
    with pytest.raises(MCPError) as refused:
        await host.call("engram_memory_get", args, meta=meta)
    return refused.value.code


# Both engines and both transports, in two deployments: the claim travels the same way on each.
@pytest.mark.parametrize("deployment", ["stdio-embedded", "http-opa"], indirect=True)
async def test_a_principal_is_served_through_its_group_claim_and_refused_without_it(
    deployment: Deployment,
) -> None:
    canary = f"canary{uuid.uuid4().hex}"
    async with deployment.host() as alice:
        captured = await _capture(alice, f"Courier {canary} needs a signature on delivery.")
        record_id = (await _admit(alice, captured["candidate_id"]))["outcome"]["record_id"]

        zoe = alice.rebind(principal=ZOE.principal, groups=ZOE.groups)
        assert {tool.name for tool in await zoe.list_tools()} == READER_TOOLS
        found = await _search(zoe, canary)
        assert [r["record"]["record_id"] for r in found] == [record_id]
        read = _value(await _get(zoe, record_id))
        assert read["record"]["record_id"] == record_id

        without_groups = zoe.rebind(groups=())
        assert await without_groups.list_tools() == []
        assert await _refused_code(without_groups, record_id) == UNDISCOVERABLE
        other_purpose = zoe.rebind(purpose_ref="purpose:marketing")
        assert await _refused_code(other_purpose, record_id) == UNDISCOVERABLE
        unsorted = ["group:support-advisors", "group:a"]
        assert await _refused_code(zoe, record_id, groups=unsorted) == INVALID_CONTEXT
