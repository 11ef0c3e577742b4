"""core/refusal_stream.py through `MemoryService`: refusals before binding land in the
host-level stream, and a refusal storm grows the trail by a bounded, exact amount."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from engram_memory.contract.exceptions import ProtocolRefusal
from engram_memory.contract.refusals import PreBindingRefusal, RefusalReason
from engram_memory.core.runtime import Services
from engram_memory.host.context import mint_invocation
from engram_memory.host.keys import HostSigningKey
from engram_memory.store import audit
from engram_memory.tools.dispatch import CallRequest, MemoryService
from tests.harness import Caller

GET = "engram_memory_get"
UNKNOWN = "mem_" + "a" * 52
BURST = 10
INTERVAL_MS = 60_000


class _Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock(services: Services) -> _Clock:
    # A little ahead of the wall clock, so that contexts minted meanwhile are not "future".
    return _Clock(services.clock_ms() + 5_000)


@pytest.fixture
def service(services: Services, clock: _Clock) -> Iterator[MemoryService]:
    settings = dataclasses.replace(
        services.settings, refusal_burst=BURST, refusal_interval_ms=INTERVAL_MS
    )
    service = MemoryService(dataclasses.replace(services, clock_ms=clock, settings=settings))
    yield service
    service.close()  # stops its summary timer while the store is open


def _rows(services: Services, where: str = "TRUE") -> list[dict[str, Any]]:
    columns = "scope_ref, audit_id, tool, outcome, transport, peer, reason, token_digest, "
    columns += "occurrences, first_at, last_at, detail"
    with services.database.reading() as tx:
        rows = tx.fetchall(f"SELECT {columns} FROM audit_entries WHERE {where} ORDER BY sequence")  # noqa: S608
    names = [c.strip() for c in columns.split(",")]
    return [dict(zip(names, row, strict=True)) for row in rows]


def _forged_token(caller: Caller) -> str:
    return mint_invocation(
        HostSigningKey.generate(),
        host_id="host:x",
        tenant=caller.tenant,
        workspace=caller.workspace,
        principal=caller.principal,
        agent_id="agent:x",
        session="s",
        purpose_ref=caller.purpose_ref,
        audit_id="audit:forged",
    )


def _refused(service: MemoryService, request: CallRequest) -> int:
    with pytest.raises(ProtocolRefusal) as refused:
        service.call_tool(request)
    return refused.value.code.rpc_code


def test_a_forged_token_leaves_a_host_stream_entry_with_its_digest_and_no_tenant(
    service: MemoryService, services: Services
) -> None:
    caller = Caller(service)
    forged = _forged_token(caller)
    request = CallRequest(GET, {}, forged, transport="http", peer="127.0.0.1")
    assert _refused(service, request) == -32603
    (entry,) = _rows(services)
    assert entry["scope_ref"] == "host"
    assert entry["audit_id"].startswith("host:")
    assert "forged" not in entry["audit_id"]
    assert (entry["reason"], entry["tool"], entry["outcome"]) == ("token_invalid", GET, "refused")
    assert (entry["transport"], entry["peer"]) == ("http", "127.0.0.1")
    assert entry["token_digest"] == "sha256:" + hashlib.sha256(forged.encode()).hexdigest()
    assert entry["occurrences"] == 1


def test_missing_expired_and_unknown_tool_refusals_are_told_apart(
    service: MemoryService, services: Services, clock: _Clock
) -> None:
    caller = Caller(service)
    assert _refused(service, CallRequest(GET, {}, None)) == -32603
    expired = caller.token(now_s=clock.now_ms // 1000 - 1_000)
    assert _refused(service, CallRequest(GET, {}, expired)) == -32603
    assert _refused(service, CallRequest("drop_tables", {}, caller.token())) == -32602
    rows = _rows(services)
    assert [(r["reason"], r["tool"], r["token_digest"] != "") for r in rows] == [
        ("token_missing", GET, False),
        ("token_expired", GET, True),
        ("unknown_tool", "tools/call", True),  # the unknown name itself is not stored
    ]


def test_client_chosen_text_never_reaches_the_stream_verbatim(
    service: MemoryService, services: Services
) -> None:
    service.refused_before_binding(
        PreBindingRefusal(
            "carrier-pigeon", "x" * 500 + "\n", "evil/method", RefusalReason.PARSE_ERROR
        )
    )
    (entry,) = _rows(services)
    assert (entry["transport"], entry["tool"]) == ("other", "other")
    assert entry["peer"] == "other"


def test_ten_thousand_bad_calls_in_a_minute_grow_the_trail_by_a_bounded_exact_amount(
    service: MemoryService, services: Services, clock: _Clock
) -> None:
    caller = Caller(service)
    forged = _forged_token(caller)
    start = clock.now_ms
    legitimate = []
    for n in range(10_000):
        clock.now_ms = start + n * 5  # 10,000 calls within 50 s
        request = CallRequest(GET, {}, forged, transport="stdio", peer="stdio")
        assert _refused(service, request) == -32603
        if n % 2_500 == 0:  # a legitimate client is served, and audited, meanwhile
            legitimate.append(
                caller.call(GET, {"record_id": UNKNOWN, "purpose_ref": caller.purpose_ref})
            )
    assert [envelope["error"]["code"] for envelope in legitimate] == ["NOT_FOUND"] * 4
    assert len(_rows(services, "scope_ref = 'host'")) == BURST  # the summary is still owed
    clock.now_ms = start + INTERVAL_MS
    service.refused_before_binding(
        PreBindingRefusal("stdio", "stdio", "ping", RefusalReason.PARSE_ERROR)
    )
    host = _rows(services, "scope_ref = 'host' AND reason = 'token_invalid'")
    assert len(host) == BURST + 1
    summary = host[-1]
    assert summary["detail"] == "counted refusals"
    assert summary["token_digest"] == ""
    assert sum(row["occurrences"] for row in host) == 10_000
    assert summary["first_at"] < summary["last_at"]
    assert len(_rows(services, "outcome = 'NOT_FOUND'")) == 4  # allowed calls: one each
    with services.database.reading() as tx:
        audit.verify(tx)


def test_bound_schema_refusals_are_counted_per_principal_and_summarised_at_shutdown(
    service: MemoryService, services: Services
) -> None:
    caller = Caller(service)
    malformed = {"record_id": UNKNOWN, "purpose_ref": caller.purpose_ref, "extra": 1}
    for _ in range(BURST + 25):
        assert caller.call(GET, malformed)["error"]["code"] == "INVALID_SCHEMA"
    assert len(_rows(services, "outcome = 'INVALID_SCHEMA'")) == BURST
    service.close()
    rows = _rows(services, "outcome = 'INVALID_SCHEMA'")
    assert [r["occurrences"] for r in rows] == [1] * BURST + [25]
    assert rows[-1]["scope_ref"] == "tenant:acme/workspace:support"
    assert rows[-1]["audit_id"].startswith("summary:")
    with services.database.reading() as tx:
        audit.verify(tx)


def test_a_counted_refusal_still_burns_its_token_across_a_restart(
    service: MemoryService, services: Services, clock: _Clock
) -> None:
    caller = Caller(service)
    malformed = {"record_id": UNKNOWN, "purpose_ref": caller.purpose_ref, "extra": 1}
    for _ in range(BURST):
        caller.call(GET, malformed)
    counted = caller.token()
    envelope = service.call_tool(CallRequest(GET, malformed, counted))
    assert envelope["error"]["code"] == "INVALID_SCHEMA"
    service.close()
    restarted = MemoryService(dataclasses.replace(services, clock_ms=clock))
    assert _refused(restarted, CallRequest(GET, {}, counted)) == -32603


def test_the_summary_timer_writes_an_ended_window_without_another_refusal(
    services: Services,
) -> None:
    settings = dataclasses.replace(services.settings, refusal_burst=0, refusal_interval_ms=1)
    service = MemoryService(dataclasses.replace(services, settings=settings))
    service.refused_before_binding(
        PreBindingRefusal("http", "10.1.1.1", "tools/list", RefusalReason.TOKEN_MISSING)
    )
    # Nothing else is recorded: only the timer can write the ended window's summary.
    assert service.refusal_stream.summaries_written.wait(timeout=10)
    (summary,) = _rows(services, "scope_ref = 'host'")
    assert (summary["occurrences"], summary["reason"]) == (1, "token_missing")
    service.close()
