"""Consistent protocol codes (issue 9 item 8), on the wire of the real server, stdio and HTTP.

`tools/list` in a policy outage is the retriable -32000 (never an empty list, never the
"stop" -32603), while a call in the same outage gets the POLICY_UNAVAILABLE envelope; no
JSON-RPC error carries data or any text of the request (the SDK's -32601 would echo the
method name, its params validation the offending values). Those refusals are audited in the
host-level stream (method_not_found, invalid_request) with transport and peer, and no text of
the request; in the outage, the listing is a bound `rpc:-32000` entry and a forged token a
host-stream `token_invalid` entry.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram_memory.client.reference_host import connect
from engram_memory.contract.errors import ProtocolCode
from engram_memory.host.context import INVOCATION_META_KEY
from tests.adversarial.refusal_support import (
    bound_refusals,
    host_entries,
    refused_count,
)
from tests.adversarial.wire import (
    ALICE,
    RawHttp,
    Secrets,
    make_secrets,
    raw_stdio,
    request,
    search_call,
    serving_http,
)
from tests.servers import free_port

Exchange = Callable[[bytes], dict[str, Any]]
# Planted in every hostile request: it must never come back.
MARKER = "zz-planted-by-the-client-zz"


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Secrets:
    return make_secrets(tmp_path_factory.mktemp("protocol-codes"))


# What the outage tests sent, by (outcome or host reason, tool): the trail must hold exactly it.
_OUTAGE_SENT: Counter[tuple[str, str]] = Counter()


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secrets]:
    """A server whose OPA server is down (nothing listens at its URL); once its last server
    stopped, the trail holds each outage refusal the tests sent, exactly."""
    policy = f"http://127.0.0.1:{free_port()}"
    secrets = make_secrets(tmp_path_factory.mktemp("outage"), ENGRAM_POLICY=policy)
    yield secrets
    data_dir = Path(secrets.env["ENGRAM_DATA_DIR"])
    for (outcome, tool), sent in _OUTAGE_SENT.items():
        if outcome == "token_invalid":
            assert refused_count(host_entries(data_dir), reason=outcome, tool=tool) == sent
        else:
            assert bound_refusals(data_dir, outcome, tool)[1] == sent, (outcome, tool)


@pytest.fixture(scope="module")
def served(secrets: Secrets, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Its own store: the stdio server of this module may hold the other one.
    data_dir = tmp_path_factory.mktemp("http-data")
    with serving_http({**secrets.env, "ENGRAM_DATA_DIR": str(data_dir)}) as url:
        yield url


def _exchange_for(transport: str, env: dict[str, str]) -> Iterator[Exchange]:
    if transport == "stdio":
        with raw_stdio(env) as stdio:
            yield stdio.exchange
        return
    with serving_http(env) as url:
        client = RawHttp(url)
        yield lambda raw: client.post(raw).message
        client.close()


@pytest.fixture(scope="module", params=["stdio", "http"])
def outage_exchange(request: pytest.FixtureRequest, outage: Secrets) -> Iterator[Exchange]:
    yield from _exchange_for(str(request.param), outage.env)


@pytest.fixture(scope="module", params=["stdio", "http"])
def exchange(request: pytest.FixtureRequest, secrets: Secrets) -> Iterator[Exchange]:
    if request.param == "stdio":
        yield from _exchange_for("stdio", secrets.env)
        return
    client = RawHttp(request.getfixturevalue("served"))
    yield lambda raw: client.post(raw).message
    client.close()


def _list_tools(request_id: int, token: str) -> bytes:
    return request(request_id, "tools/list", {"_meta": {INVOCATION_META_KEY: token}})


def _assert_error_without_data(answer: dict[str, Any], code: int, request_id: int) -> None:
    assert answer["id"] == request_id
    assert answer["error"]["code"] == code
    assert set(answer["error"]) == {"code", "message"}
    assert MARKER not in json.dumps(answer)


def test_tools_list_in_a_policy_outage_is_the_retriable_server_error(
    outage_exchange: Exchange, outage: Secrets
) -> None:
    answer = outage_exchange(_list_tools(1, outage.token()))
    _OUTAGE_SENT["rpc:-32000", "tools/list"] += 1  # a bound entry: the binding was valid
    _assert_error_without_data(answer, ProtocolCode.POLICY_UNAVAILABLE.rpc_code, 1)
    assert answer["error"]["code"] == -32000


def test_a_tool_call_in_the_same_outage_is_the_policy_unavailable_envelope(
    outage_exchange: Exchange, outage: Secrets
) -> None:
    envelope = outage_exchange(search_call(2, outage.token()))["result"]["structuredContent"]
    _OUTAGE_SENT["POLICY_UNAVAILABLE", "engram_memory_search"] += 1
    assert envelope["ok"] is False
    assert envelope["error"]["code"] == "POLICY_UNAVAILABLE"
    assert envelope["error"]["retriable"] is True


def test_tools_list_with_a_forged_token_in_an_outage_is_still_refused_at_the_binding(
    outage_exchange: Exchange, outage: Secrets
) -> None:
    answer = outage_exchange(_list_tools(3, outage.token()[:-4] + "AAAA"))
    _OUTAGE_SENT["token_invalid", "tools/list"] += 1  # in the host stream: no binding
    _assert_error_without_data(answer, -32603, 3)


def test_an_unknown_method_is_method_not_found_without_its_name(
    exchange: Exchange, secrets: Secrets
) -> None:
    _assert_error_without_data(exchange(request(4, f"tools/{MARKER}")), -32601, 4)
    assert exchange(search_call(5, secrets.token()))["result"]["structuredContent"]["ok"]


_BAD_PARAMS = {
    "call_without_a_name": request(6, "tools/call", {"arguments": {"q": MARKER}}),
    "call_with_a_numeric_name": request(6, "tools/call", {"name": 7, "arguments": {}}),
    "list_with_an_object_cursor": request(6, "tools/list", {"cursor": {"c": MARKER}}),
    "initialize_again_with_junk": request(6, "initialize", {"protocolVersion": MARKER}),
}


@pytest.mark.parametrize("raw", _BAD_PARAMS.values(), ids=_BAD_PARAMS)
def test_params_the_sdk_rejects_are_refused_without_data_or_echo(
    exchange: Exchange, secrets: Secrets, raw: bytes
) -> None:
    answer = exchange(raw)
    assert answer["id"] == 6
    assert set(answer["error"]) == {"code", "message"}
    assert MARKER not in json.dumps(answer)
    assert exchange(search_call(7, secrets.token()))["result"]["structuredContent"]["ok"]


def test_a_2026_era_request_over_http_is_refused_without_data_or_echo(served: str) -> None:
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": MARKER,
    }
    meta = {"io.modelcontextprotocol/protocolVersion": MARKER}
    response = httpx.post(served, content=request(8, MARKER, {"_meta": meta}), headers=headers)
    answer = response.json()
    assert "error" in answer
    assert set(answer["error"]) == {"code", "message"}
    assert MARKER not in response.text


async def test_the_reference_host_is_served_after_the_refusals(
    served: str, secrets: Secrets
) -> None:
    client = RawHttp(served)
    try:
        for raw in (request(9, f"x/{MARKER}"), *_BAD_PARAMS.values()):
            assert "error" in client.post(raw).message
    finally:
        client.close()
    async with connect(served, secrets.signer, ALICE) as host:
        listed = {tool.name for tool in await host.list_tools()}
    assert "engram_memory_search" in listed


# Every refusal of an audited run is recorded one by one (no summary), in the order sent.
_NO_SUMMARY = {"ENGRAM_REFUSAL_BURST": "1000", "ENGRAM_HTTP_UNBOUND_SESSION_SECONDS": "600"}
_UNKNOWN_METHOD = request(4, f"tools/{MARKER}")


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_refusals_the_sdk_makes_are_audited_in_the_host_stream_without_request_text(
    tmp_path: Path, transport: str
) -> None:
    secrets = make_secrets(tmp_path, **_NO_SUMMARY)
    exchanges = _exchange_for(transport, secrets.env)
    exchange = next(exchanges)
    for raw in (_UNKNOWN_METHOD, *_BAD_PARAMS.values()):
        assert "error" in exchange(raw)
    assert exchange(search_call(7, secrets.token()))["result"]["structuredContent"]["ok"]
    for _ in exchanges:  # ends the generator: the server stops, the store can be read
        pass
    entries = host_entries(tmp_path / "data")
    if transport == "http":
        entries = entries
    assert [(e["reason"], e["tool"]) for e in entries] == [
        ("method_not_found", "other"),  # the method's name is the client's: not recorded
        ("invalid_request", "tools/call"),
        ("invalid_request", "tools/call"),
        ("invalid_request", "tools/list"),
        ("invalid_request", "initialize"),
    ]
    peer = "stdio" if transport == "stdio" else "127.0.0.1"
    assert {(e["transport"], e["peer"], e["occurrences"]) for e in entries} == {
        (transport, peer, 1)
    }
    assert MARKER not in repr(entries)


def test_requests_the_sdks_http_transport_refuses_are_audited_in_the_host_stream(
    tmp_path: Path,
) -> None:
    secrets = make_secrets(tmp_path, **_NO_SUMMARY)
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    refused = {
        # (headers, body): each answered 4xx by the SDK before any handler runs
        "no_session": (headers, request(1, "tools/list", {})),
        "unknown_session": ({**headers, "mcp-session-id": MARKER}, request(2, "ping")),
        "unacceptable_accept": ({**headers, "accept": "text/html"}, request(3, "ping")),
        "foreign_host": ({**headers, "host": "rebound.example"}, request(4, "ping")),
        "unknown_protocol_version": (
            {**headers, "mcp-protocol-version": MARKER},
            request(5, MARKER, {"_meta": {"io.modelcontextprotocol/protocolVersion": MARKER}}),
        ),
    }
    with serving_http(secrets.env) as url:
        statuses = [
            httpx.post(url, content=body, headers=h).status_code for h, body in refused.values()
        ]
        client = RawHttp(url)
        assert client.post(search_call(6, secrets.token())).message["result"]["structuredContent"][
            "ok"
        ]
        client.close()
    assert all(400 <= status < 500 for status in statuses), statuses
    entries = host_entries(tmp_path / "data")
    assert [(e["reason"], e["tool"]) for e in entries] == [
        ("invalid_request", "tools/list"),
        ("invalid_request", "ping"),
        ("invalid_request", "ping"),
        ("invalid_request", "ping"),
        ("invalid_request", "other"),
    ]
    assert {(e["transport"], e["peer"], e["occurrences"]) for e in entries} == {
        ("http", "127.0.0.1", 1)
    }
    assert MARKER not in repr(entries)
