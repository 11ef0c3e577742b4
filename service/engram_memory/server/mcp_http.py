"""MCP over streamable HTTP: the SDK's app at `/mcp` behind our guard, drain and JSON gate.

Apart from mcp_wiring.py (the server both transports share) so that only `serve --transport
http` imports uvicorn and the HTTP transport (transport/http_*.py).
"""

from __future__ import annotations

from typing import Any

import uvicorn
from mcp.server.transport_security import TransportSecuritySettings

from engram_memory.server.mcp_wiring import audit_refusal, build_server, sdk_accepts
from engram_memory.tools.dispatch import MemoryService
from engram_memory.transport.http_guard import TransportGuard
from engram_memory.transport.http_serving import AdmitWhileServing, HealthProbe, serve_asgi
from engram_memory.transport.http_settings import HttpSettings
from engram_memory.transport.json_gate import GateRefusal
from engram_memory.transport.json_gate_http import JsonGate
from engram_memory.transport.stopping import GracefulStop


def _json_gated(app: Any, service: MemoryService, max_body: int) -> JsonGate:
    """`app` behind the strict-JSON gate; its refusals are recorded like stdio's."""

    async def audited(refusal: GateRefusal, peer: str) -> None:
        await audit_refusal(service, refusal, "http", peer)

    return JsonGate(app, max_body=max_body, accepts=sdk_accepts, on_refusal=audited)


def http_server(
    service: MemoryService,
    host: str,
    port: int,
    stop: GracefulStop | None = None,
    settings: HttpSettings | None = None,
    language: str = "en",
) -> uvicorn.Server:
    """A uvicorn server for streamable HTTP at `/mcp` (build a new one per start); run it
    with the socket from `listen`. It prints its URL once it listens. `settings` bound its
    connections, sessions, timeouts and request size (http_settings.py)."""
    stop = stop or GracefulStop()
    settings = settings or HttpSettings(host=host)
    # Not json_response: a quick call still answers with plain JSON, but a call that runs on
    # is streamed, so a client closing the stream (how the 2026 era cancels) cancels it.
    app = build_server(service, stop, "http", language).streamable_http_app(
        streamable_http_path="/mcp",
        json_response=False,
        host=host,
        max_request_body_size=settings.max_request_bytes,
        # Backstops only: the guard admits and ends sessions before the SDK's own limits bite
        # (an ended session may still be winding down in the SDK when its place is reused).
        max_sessions=2 * settings.max_sessions,
        session_idle_timeout=settings.session_idle_seconds + 60,
        # The SDK checks Host/Origin only on loopback by default; here always, with the
        # operator's lists off loopback (required by http_settings).
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(settings.allowed_hosts),
            allowed_origins=list(settings.allowed_origins),
        ),
    )
    # Outermost the guard, which reads the whole body first (so neither the JSON gate nor
    # the SDK ever sees half a body), then the drain, then the JSON gate, then the SDK.
    gated = _json_gated(app, service, settings.max_request_bytes)
    guarded = TransportGuard(
        HealthProbe(AdmitWhileServing(gated, stop), stop),
        settings,
        keyring=service.services.host_keys,
        on_refusal=service.refused_before_binding,
        now_s=lambda: service.services.clock_ms() / 1000,
    )
    return serve_asgi(guarded, settings, port, stop)
