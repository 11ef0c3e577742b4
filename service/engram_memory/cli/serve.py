"""`engram-memory serve`: the MCP server over stdio or streamable HTTP.

Building the parser imports nothing heavy; `run` imports only what its transport needs (the
HTTP stack only for `--transport http`), so a desktop client's stdio server starts at once.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from engram_memory.contract.exceptions import ConfigurationError

if TYPE_CHECKING:
    from engram_memory.core.service_config import ServiceConfig
    from engram_memory.tools.dispatch import MemoryService
    from engram_memory.transport.stopping import GracefulStop


def add_parser(sub: Any) -> argparse.ArgumentParser:
    serve: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the MCP server (stdio or streamable HTTP)",
        description="Run the MCP server. Each flag overrides its environment variable; "
        "SIGTERM or SIGINT stops gracefully (calls in flight answer first, the store is "
        "checkpointed and closed, exit 0).",
    )
    serve.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio, or streamable HTTP at http://HOST:PORT/mcp (default: stdio)",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on with http (default: 127.0.0.1)"
    )
    serve.add_argument("--port", type=int, default=8765, help="http port; 0: any free one (8765)")
    serve.add_argument("--port-file", help="http: once bound, write the port bound to this file")
    serve.add_argument(
        "--data-dir", help="store and key directory (env ENGRAM_DATA_DIR; default: ./.engram)"
    )
    serve.add_argument(
        "--host-keys",
        help="trusted host public keys, PEM bundle or JWKS (env ENGRAM_HOST_KEYS; required)",
    )
    serve.add_argument(
        "--root-key", help="root key file, mode 0600 (env ENGRAM_ROOT_KEY; required)"
    )
    serve.add_argument(
        "--policy",
        help="'embedded' (in-process Wasm), 'opa-spawn' (a private OPA server; needs the OPA "
        "binary, found via ENGRAM_OPA_BIN or PATH) or an OPA URL http(s)://host:port "
        "(env ENGRAM_POLICY; default: embedded)",
    )
    serve.add_argument(
        "--bundle",
        help="policy bundle directory (env ENGRAM_BUNDLE; default: the bundle shipped in "
        "the package)",
    )
    serve.add_argument(
        "--bundle-verification-key",
        help="PEM RSA public key the bundle must be signed with (`policy sign`); unsigned or "
        "tampered bundles are refused (env ENGRAM_BUNDLE_VERIFICATION_KEY; default: "
        "signatures not checked)",
    )
    serve.add_argument(
        "--bundle-key-id",
        help="key id the bundle signature must name, required with the key "
        "(env ENGRAM_BUNDLE_KEY_ID)",
    )
    serve.add_argument(
        "--bundle-service",
        help="with an OPA URL: the URL of the signed bundle.tar.gz the OPA fleet pulls; any "
        "revision published there signed by the verification key is trusted (env "
        "ENGRAM_BUNDLE_SERVICE; needs --bundle-verification-key and --bundle-key-id)",
    )
    serve.add_argument(
        "--enable-memory",
        action="store_true",
        help="offer the memory tools, the host opt-in (env ENGRAM_MEMORY_ENABLED=true; "
        "default: off)",
    )
    serve.add_argument(
        "--drain-seconds",
        help="how long a stop waits for calls in flight before abandoning them "
        "(env ENGRAM_DRAIN_SECONDS; default: 10)",
    )
    _add_http_flags(serve)
    serve.add_argument(
        "--store-audience",
        help="this store's name in invocation tokens' `aud`: tokens must name it, and a token "
        "naming another store is refused (env ENGRAM_STORE_AUDIENCE; default: none)",
    )
    serve.add_argument(
        "--refusal-burst",
        help="refusals audited one by one per key (peer or principal, reason, tool) and "
        "window before the rest are counted (env ENGRAM_REFUSAL_BURST; default: 10)",
    )
    serve.add_argument(
        "--refusal-interval-s",
        help="the window, in seconds, after which one summary entry records the refusals "
        "counted in it (env ENGRAM_REFUSAL_INTERVAL_S; default: 60)",
    )
    serve.add_argument(
        "--checkpoint-key",
        help="Ed25519 private key (PEM, 0600) that signs audit checkpoints and export "
        "manifests (env ENGRAM_CHECKPOINT_KEY; default: none, nothing is signed)",
    )
    serve.add_argument(
        "--checkpoint-interval-s",
        help="seconds between signed checkpoints, written only when a head moved "
        "(env ENGRAM_CHECKPOINT_INTERVAL_S; default: 300)",
    )
    return serve


def run(args: argparse.Namespace) -> int:
    from engram_memory.contract.agent_manual import configured_language
    from engram_memory.core.service_config import load_config
    from engram_memory.transport.http_settings import load_http_settings, load_max_request_bytes
    from engram_memory.transport.stopping import GracefulStop

    language = configured_language()  # a bad value exits 2 before anything opens
    config = load_config(
        {
            "data_dir": args.data_dir,
            "host_keys": args.host_keys,
            "root_key": args.root_key,
            "policy": args.policy,
            "bundle": args.bundle,
            "bundle_verification_key": args.bundle_verification_key,
            "bundle_key_id": args.bundle_key_id,
            "bundle_service": args.bundle_service,
            "memory_enabled": "true" if args.enable_memory else None,
            "drain_seconds": args.drain_seconds,
            "store_audience": args.store_audience,
            "refusal_burst": args.refusal_burst,
            "refusal_interval_s": args.refusal_interval_s,
            "checkpoint_key": args.checkpoint_key,
            "checkpoint_interval_s": args.checkpoint_interval_s,
        }
    )
    http_settings = None
    # Checked for both transports: stdio caps a line as HTTP caps a body.
    max_request_bytes = load_max_request_bytes({"max_request_bytes": args.max_request_bytes})
    if args.transport == "http":
        from engram_memory.server.mcp_http import http_server  # the HTTP stack: only here

        http_settings = load_http_settings(
            args.host, {name: getattr(args, name) for name in _HTTP_FLAGS}
        )
    # Before the store opens: a taken port must cost nothing and say so plainly.
    listener = _listen(args) if args.transport == "http" else None
    if http_settings is not None and (warning := http_settings.exposure_warning()):
        _say(warning)
    stop = GracefulStop(config.drain_seconds)
    stop.on_begin(
        lambda: _say(
            f"stopping: {stop.in_flight} call(s) in flight, waiting up to {stop.drain_seconds:g} s"
        )
    )
    # Until a transport serves, a stop signal unwinds startup (closing what is open).
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _interrupt)
    opened = ExitStack()  # what the opening opened, closed here once serving ended
    try:
        with opened:
            if args.transport == "stdio":
                _serve_stdio(config, stop, opened, max_request_bytes, language, args)
            else:
                service = _open(config, stop, opened, args)
                assert listener is not None
                # The bound port, not the flag: with --port 0 the printed URL is the real one.
                port = int(listener.getsockname()[1])
                server = http_server(service, args.host, port, stop, http_settings, language)
                server.run(sockets=[listener])
            # While closing, a further signal only cuts the remaining drain short.
            for sig in _STOP_SIGNALS:
                signal.signal(sig, lambda _sig, _frame: stop.request())
    except KeyboardInterrupt:
        _say("stopped before serving")
        return 0
    finally:
        if listener is not None:
            listener.close()
    _say("stopped")
    return 0


def _open(
    config: ServiceConfig, stop: GracefulStop, opened: ExitStack, args: argparse.Namespace
) -> MemoryService:
    """Open the agent service and its maintenance channel onto `opened`, as every start did.

    Raises: what `open_service` raises (one line, its exit code: cli/main.py).
    """
    from engram_memory.admin.channel import maintenance_channel
    from engram_memory.core.checkpoints import warn_unsigned
    from engram_memory.server.app import open_service

    with ExitStack() as opening:
        service = opening.enter_context(open_service(config))
        opening.enter_context(
            maintenance_channel(
                service.services,
                config.data_dir,
                stop=stop,
                refused=service.refused_before_binding,
            )
        )
        opened.push(opening.pop_all())
    stop.on_begin(service.services.settings.failpoints.release_paused)
    if not config.memory_enabled:
        _say(f"memory is off ({_memory_switch(args)}): no memory tool is offered")
    if config.checkpoint_key is None:  # once the store is served, not on a refusal
        warn_unsigned()
    if service.services.startup_audit is not None:
        _say(service.services.startup_audit.summary())
    return service


def _serve_stdio(
    config: ServiceConfig,
    stop: GracefulStop,
    opened: ExitStack,
    max_request_bytes: int,
    language: str,
    args: argparse.Namespace,
) -> None:
    """Serve stdio at once while the service opens beside it (server/service_opening.py).

    Raises: the opening's failure, once the session ended without answering any call.
    """
    import anyio

    from engram_memory.server.mcp_wiring import serve_stdio
    from engram_memory.server.service_opening import ServiceOpening

    opening = ServiceOpening(opener=partial(_open, config, stop, opened, args))
    anyio.run(serve_stdio, opening, stop, max_request_bytes, language)
    if opening.failure is not None:
        if opening.answered_a_client:
            from engram_memory.contract.exceptions import SERVE_OPENING_FAILED

            # The host heard `initialize` answered: tell it that no call was served, so it
            # reports a start-up refusal. Without a client, the refusal's one line is all.
            print(SERVE_OPENING_FAILED, file=sys.stderr, flush=True)
        raise opening.failure


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# `serve` flags read by http_settings.py, each named like its ENGRAM_ variable.
_HTTP_FLAGS = (
    "max_request_bytes",
    "http_max_connections",
    "http_max_connections_per_peer",
    "http_max_sessions",
    "http_max_sessions_per_peer",
    "http_max_sessions_per_principal",
    "http_session_idle_minutes",
    "http_unbound_session_seconds",
    "http_header_timeout_seconds",
    "http_body_timeout_seconds",
    "http_allowed_hosts",
    "http_allowed_origins",
    "tls_cert",
    "tls_key",
    "insecure_no_tls",
)


def _listen(args: argparse.Namespace) -> socket.socket:
    """Bind; with --port-file report the port bound (for --port 0, the kernel's pick).

    Raises: ConfigurationError: the address is taken or cannot be bound, or the port file
    cannot be written (one line).
    """
    from engram_memory.transport.http_serving import listen, write_port_file

    try:
        sock = listen(args.host, args.port)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigurationError(f"cannot listen on {args.host}:{args.port}: {reason}") from exc
    if args.port_file:
        try:
            write_port_file(Path(args.port_file), int(sock.getsockname()[1]))
        except OSError as exc:
            sock.close()
            reason = exc.strerror or type(exc).__name__
            raise ConfigurationError(f"cannot write --port-file: {reason}") from exc
    return sock


def _memory_switch(args: argparse.Namespace) -> str:
    """Which switch left memory off (only called when it is off)."""
    value = os.environ.get("ENGRAM_MEMORY_ENABLED")
    if value is None:
        return "ENGRAM_MEMORY_ENABLED is not set and --enable-memory was not given"
    return f"ENGRAM_MEMORY_ENABLED={value}"


def _interrupt(_sig: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _say(line: str) -> None:
    print(f"engram-memory: {line}", file=sys.stderr, flush=True)


# (flag, what it sets, default) of the streamable HTTP limits and exposure; the ENGRAM_
# variable of each is its name in capitals after ENGRAM_ (read by http_settings.py).
_HTTP_FLAG_HELP = (
    ("--max-request-bytes", "largest HTTP body (413) or stdio line (-32600)", "4194304"),
    ("--http-max-connections", "open connections", "128"),
    ("--http-max-connections-per-peer", "open connections per client address", "32"),
    ("--http-max-sessions", "open MCP sessions in all", "256"),
    ("--http-max-sessions-per-peer", "MCP sessions not yet bound, per client address", "32"),
    ("--http-max-sessions-per-principal", "bound MCP sessions per tenant and principal", "32"),
    ("--http-session-idle-minutes", "a session idle this long ends", "10"),
    (
        "--http-unbound-session-seconds",
        "a session no valid invocation context reached ends after",
        "10",
    ),
    ("--http-header-timeout-seconds", "a request's headers must arrive within", "10"),
    ("--http-body-timeout-seconds", "its body must arrive within, after the headers", "30"),
    (
        "--http-allowed-hosts",
        "comma-separated Host header values, name:* for any port; required off loopback",
        "loopback names",
    ),
    (
        "--http-allowed-origins",
        "comma-separated Origin values, or 'none'; required off loopback",
        "loopback origins",
    ),
    ("--tls-cert", "TLS certificate chain file (PEM), with --tls-key", "none"),
    ("--tls-key", "TLS private key file (PEM)", "none"),
)


def _add_http_flags(serve: argparse.ArgumentParser) -> None:
    """The streamable HTTP limits and exposure flags (docs/reference/configuration.md)."""
    group = serve.add_argument_group(
        "streamable HTTP limits and exposure",
        "a --host other than loopback needs allowed hosts and origins, and TLS or "
        "--insecure-no-tls",
    )
    for flag, what, default in _HTTP_FLAG_HELP:
        variable = "ENGRAM_" + flag.removeprefix("--").replace("-", "_").upper()
        group.add_argument(flag, help=f"{what} (env {variable}; default: {default})")
    group.add_argument(
        "--insecure-no-tls",
        action="store_const",
        const="true",
        help="serve plain HTTP on a non-loopback --host, tokens in clear "
        "(env ENGRAM_INSECURE_NO_TLS=true; default: off)",
    )
