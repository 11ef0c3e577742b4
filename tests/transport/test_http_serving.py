"""Streamable HTTP while stopping: a POST admitted before the stop is counted until its
response is sent; a POST arriving once the stop began gets 503 and `Connection: close`."""

from __future__ import annotations

from typing import Any

import anyio

from engram_memory.transport.http_serving import HEALTH_PATH, AdmitWhileServing, HealthProbe
from engram_memory.transport.stopping import GracefulStop


async def _post(app: AdmitWhileServing) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "method": "POST", "path": "/mcp"}, receive, send)
    return sent


async def test_a_post_in_flight_is_counted_and_a_new_one_is_refused_while_stopping() -> None:
    stop = GracefulStop(drain_seconds=30)
    entered, finish = anyio.Event(), anyio.Event()

    async def mcp_app(scope: Any, receive: Any, send: Any) -> None:
        entered.set()
        await finish.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    app = AdmitWhileServing(mcp_app, stop)
    answers: list[list[dict[str, Any]]] = []

    async def in_flight() -> None:
        answers.append(await _post(app))

    async with anyio.create_task_group() as group:
        group.start_soon(in_flight)
        await entered.wait()
        stop.begin()
        assert stop.in_flight == 1
        refused = await _post(app)
        assert refused[0]["status"] == 503
        assert (b"connection", b"close") in refused[0]["headers"]
        finish.set()
    assert answers[0][0]["status"] == 200
    assert stop.drained


async def _request(app: Any, method: str, path: str) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "method": method, "path": path}, receive, send)
    return sent


async def test_the_health_probe_answers_without_reaching_the_mcp_app_and_fails_once_stopping() -> (
    None
):
    reached: list[str] = []

    async def mcp_app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 406, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    stop = GracefulStop(drain_seconds=1)
    probe = HealthProbe(mcp_app, stop)
    assert (await _request(probe, "GET", HEALTH_PATH))[0]["status"] == 200
    assert (await _request(probe, "HEAD", HEALTH_PATH))[0]["status"] == 200
    assert (await _request(probe, "GET", "/mcp"))[0]["status"] == 406
    assert (await _request(probe, "POST", HEALTH_PATH))[0]["status"] == 406
    assert reached == ["/mcp", HEALTH_PATH]
    stop.begin()
    assert (await _request(probe, "GET", HEALTH_PATH))[0]["status"] == 503
