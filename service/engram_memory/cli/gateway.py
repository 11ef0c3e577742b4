"""`engram-memory gateway --config FILE [--check]`, `engram-memory gateway verify-audit FILE`
and `engram-memory gateway dev-idp [mint]` (a development identity provider,
cli/gateway_dev_idp.py; NOT FOR PRODUCTION).

Exit codes: 0 stopped normally (or `--check` passed, or the audit chain verified); 1 the
audit chain does not verify; 2 the configuration, the signing key, the OS user or the audit
log is unusable (one line per problem, nothing started or written).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engram_memory.contract.exceptions import (
    ConfigurationError,
    GatewayAuditInvalid,
    GatewayAuditUnavailable,
    GatewayConfigError,
)

if TYPE_CHECKING:
    from engram_memory.gateway.config import GatewayConfig

EXIT_OK = 0
EXIT_AUDIT_BROKEN = 1
EXIT_CONFIG = 2


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    gateway = sub.add_parser(
        "gateway",
        help="the signing gateway for stock MCP clients (stdio or OAuth-protected HTTP)",
        description="Serve the memory tools to a stock MCP client, minting the signed "
        "invocation context (and, after a human's yes through elicitation, the "
        "confirmation) for every call to the engram-memory server behind it. "
        "docs/operators/gateway.md documents the configuration file.",
    )
    gateway.add_argument("--config", help="the gateway configuration file (YAML)")
    gateway.add_argument(
        "--check", action="store_true", help="validate the configuration and key, then exit"
    )
    actions = gateway.add_subparsers(dest="gateway_command")
    verify = actions.add_parser(
        "verify-audit", help="re-check the hash chain of a gateway audit log (exit 0 / 1)"
    )
    verify.add_argument("file", help="the gateway audit log (JSON lines)")
    from engram_memory.cli import gateway_dev_idp

    gateway_dev_idp.add_parser(actions)
    return gateway


def _say(line: str) -> None:
    print(f"engram-memory gateway: {line}", file=sys.stderr, flush=True)


def _verify_audit(path: Path) -> int:
    from engram_memory.gateway.audit_log import verify_audit

    try:
        count = verify_audit(path)
    except OSError as exc:
        _say(f"cannot read {path}: {exc.strerror or type(exc).__name__}")
        return EXIT_CONFIG
    except GatewayAuditInvalid as exc:
        print(f"{path}: chain broken at line {exc.line}: {exc.reason}")
        return EXIT_AUDIT_BROKEN
    print(f"{path}: {count} entries, chain verified")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    """The `gateway` command.

    Raises:
        ConfigurationError: the audit log cannot be opened at start (cli.py prints it, 2).
    """
    if args.gateway_command == "verify-audit":
        return _verify_audit(Path(args.file))
    if args.gateway_command == "dev-idp":
        from engram_memory.cli import gateway_dev_idp

        return gateway_dev_idp.run(args)
    if not args.config:
        _say("--config FILE is required")
        return EXIT_CONFIG
    from engram_memory.contract.agent_manual import configured_language
    from engram_memory.gateway.preflight import preflight

    configured_language()  # the agent's manual: a bad ENGRAM_INSTRUCTIONS_LANGUAGE exits 2 now

    try:
        # The file and the machine (key, audit log, upstream, OS user), every problem at once.
        config = preflight(Path(args.config))
    except GatewayConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)  # one line each, nothing else: clients log stderr
        return EXIT_CONFIG
    if args.check:
        _say(f"configuration {args.config} is valid (mode {config.mode})")
        return EXIT_OK
    return _serve(config)


def _serve(config: GatewayConfig) -> int:
    import anyio

    from engram_memory.gateway.audit_log import GatewayAudit

    # The log's directory (`~/.engram` on a first run) is ours to make, private.
    config.audit_log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        audit = GatewayAudit.open(config.audit_log, config.host_id)
    except GatewayAuditUnavailable as exc:
        raise ConfigurationError(str(exc)) from None
    with audit:
        if config.mode == "stdio":
            from engram_memory.gateway.stdio import serve_stdio

            # SIGTERM and SIGINT end the process at once: every audit line is already
            # fsynced, and the child, its stdin closed with us, stops gracefully. (Unwinding
            # instead would wait forever on the SDK's stdin reader thread.)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            anyio.run(serve_stdio, config, audit)
            return EXIT_OK
        try:
            # gateway/http.py is gwhttp's (issue 11); until it is merged, say so.
            from engram_memory.gateway.http import (  # type: ignore[import-not-found,unused-ignore]
                run_http,
            )
        except ImportError:
            _say("mode http is not available in this build (engram_memory.gateway.http missing)")
            return EXIT_CONFIG
        from engram_memory.gateway.stdio import upstream_for

        code: int = run_http(config, upstream_for(config, audit), audit)
        return code
