"""Issue 20 item 3 on the real server: reads are served from memory, and a record forgotten
is never served from there: a get or a search sent right after
the forget's answer finds nothing, whatever the earlier reads left in memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial.evidence_support import (
    accepted,
    captured,
    code,
    forget_args,
    key,
    real_server,
    value,
)

GET = "engram_memory_get"
SEARCH = "engram_memory_search"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_get_and_search_right_after_forget_and_withdraw_find_nothing(
    transport: str, tmp_path: Path
) -> None:
    with real_server(transport, tmp_path) as server:
        async with server.host() as host:
            purpose = host.binding.purpose_ref
            record_id = await accepted(host, "Courier lost parcel 9917; refund approved.")
            kept = await accepted(host, "Courier lost parcel 9918; refund approved.")
            read = {"record_id": record_id, "purpose_ref": purpose}
            query = {"query": "parcel", "purpose_ref": purpose}
            # Read twice: the row and its key are now in memory.
            for _ in range(2):
                assert value(await host.call(GET, read))["record"]["record_id"] == record_id
                found = value(await host.call(SEARCH, query))["records"]
                assert {p["record"]["record_id"] for p in found} == {record_id, kept}

            args = forget_args(record_id)
            token = host.confirmation_for("engram_memory_forget", args, record_id, "human:dana")
            value(await host.call("engram_memory_forget", args, confirmation=token))

            assert code(await host.call(GET, read)) == "NOT_FOUND"
            found = value(await host.call(SEARCH, query))["records"]
            assert [p["record"]["record_id"] for p in found] == [kept]

            candidate_id = (await captured(host, "Draft the agent takes back."))["candidate_id"]
            withdraw = {
                "candidate_id": candidate_id,
                "idempotency_key": key("wdr"),
                "reason_ref": "r:r",
            }
            token = host.confirmation_for(
                "engram_memory_withdraw", withdraw, candidate_id, "human:dana"
            )
            value(await host.call("engram_memory_withdraw", withdraw, confirmation=token))
            # A withdraw right after changes nothing of what reads serve.
            found = value(await host.call(SEARCH, query))["records"]
            assert [p["record"]["record_id"] for p in found] == [kept]
            assert code(await host.call(GET, read)) == "NOT_FOUND"
