"""Four-eyes through the signing gateway (issue 22 item 2): the gateway asserts the
approver's groups it knows (here the desktop binding's configured `approver_groups`) in the
confirmations it mints, so the shipped acme `records` rule "approver in
group:records-officers" lets a member's yes through and refuses a non-member's as
`gate_failed`, with nothing forgotten. The real SDK client spawns the real gateway, which
spawns the real server (embedded Wasm, or a private real OPA server) on a real DuckDB file.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import mcp_types as types
import pytest
from mcp.client.session import ClientRequestContext

from engram_memory.policy.opa_binary import find_opa_binary
from engram_memory.store.connection import DATABASE_FILE
from tests.e2e.gateway_support import (
    code,
    envelope,
    forget_arguments,
    gateway_client,
    get,
    remembered,
    value,
    write_setup,
)

pytestmark = pytest.mark.e2e

Secrets = tuple[Path, Path, Path]
FORGET = "engram_memory_forget"
# kim files customer records as a records clerk; the human who says yes at her desk is
# configured as the approver, with the groups the organisation gives that person.
RECORDS = {
    "workspace": "records",
    "principal": "user:kim",
    "groups": ["group:records-clerks"],
}


async def _yes(
    _ctx: ClientRequestContext, _params: types.ElicitRequestParams
) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"confirm": True})


def _engine_env(engine: str) -> dict[str, str]:
    if engine == "embedded":
        return {}
    opa = find_opa_binary()
    if opa is None:
        if os.environ.get("CI") == "true":
            pytest.fail("OPA binary not found in CI")
        pytest.skip("OPA binary not found (set ENGRAM_OPA_BIN)")
    return {"ENGRAM_POLICY": "opa-spawn", "ENGRAM_OPA_BIN": str(opa)}


def _forget_entries(data_dir: Path) -> list[tuple[str, str, str | None]]:
    with duckdb.connect(str(data_dir / DATABASE_FILE), read_only=True) as con:
        rows = con.execute(
            "SELECT outcome, detail, approver FROM audit_entries WHERE tool = ? ORDER BY sequence",
            [FORGET],
        ).fetchall()
    return [(str(o), str(d), a) for o, d, a in rows]


@pytest.mark.parametrize("engine", ["embedded", "opa-spawn"])
async def test_the_gateway_asserts_the_approvers_groups_for_a_records_officer_rule(
    tmp_path: Path, host_secrets: Secrets, engine: str
) -> None:
    outcomes: dict[str, tuple[str, Path]] = {}
    approvers = {
        "member": ("human:olga", ["group:records-officers"]),
        "non_member": ("human:lee", ["group:records-clerks"]),
    }
    for who, (approver, groups) in approvers.items():
        setup = write_setup(
            tmp_path / who,
            host_secrets,
            upstream_env=_engine_env(engine),
            **RECORDS,
            approver=approver,
            approver_groups=groups,
        )
        async with gateway_client(setup, elicit=_yes) as client:
            record_id = await remembered(client, f"Customer file of {who} closed.")
            result = await client.call_tool(FORGET, forget_arguments(record_id))
            body = envelope(result)
            outcomes[who] = ("ok" if body["ok"] else code(result), setup.data_dir)
            if body["ok"]:
                assert code(await get(client, record_id)) == "NOT_FOUND"
            else:  # refused: nothing changed, the record is still readable
                assert value(await get(client, record_id))["record"]["record_id"] == record_id

    assert outcomes["member"][0] == "ok"
    assert outcomes["non_member"][0] == "gate_failed"
    assert _forget_entries(outcomes["member"][1]) == [("ok", "", "human:olga")]
    assert _forget_entries(outcomes["non_member"][1]) == [
        ("gate_failed", "approval refused by rule approver-is-records-officer", None)
    ]
