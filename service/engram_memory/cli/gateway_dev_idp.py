"""`engram-memory gateway dev-idp [mint]`: a development identity provider. NOT FOR PRODUCTION.

`dev-idp` serves RFC 8414 metadata, a JWKS and `/mint` on loopback (gateway/dev_idp.py) until
Ctrl-C; `dev-idp mint` prints one access token from the running one (stdout: the token only,
so `TOKEN=$(...)` works). Exit codes: 0 done; 2 refused (`DEV_IDP_*`, one line on stderr).
Building the parser imports nothing heavy: the IdP's modules are imported by `run`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8790  # examples/gateway/team-dev.yaml's issuer
_WARNING = "NOT FOR PRODUCTION"
EXIT_REFUSED = 2


def add_parser(actions: Any) -> argparse.ArgumentParser:
    """`dev-idp` (and its `mint`) under `gateway`'s subcommands."""
    idp: argparse.ArgumentParser = actions.add_parser(
        "dev-idp",
        help=f"{_WARNING}: a development identity provider on loopback, to try team mode",
        description=f"{_WARNING}. A development identity provider for trying the HTTP "
        "gateway on one machine: an ephemeral in-memory ES256 key, its JWKS and RFC 8414 "
        "metadata on loopback, and tokens for any subject and group on request (nobody logs "
        "in). Never point a real gateway at it. docs/operators/team-mode.md walks through it.",
    )
    idp.add_argument(
        "--host", default=DEFAULT_HOST, help="loopback address to listen on (default %(default)s)"
    )
    idp.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="port (default %(default)s; 0: any free)"
    )
    idp.add_argument(
        "--audience",
        help="the `aud` of minted tokens unless `mint --audience` says otherwise "
        "(default http://127.0.0.1:8787/mcp, team-dev.yaml's resource)",
    )
    _state_argument(idp)
    mint_actions = idp.add_subparsers(dest="dev_idp_command")
    mint = mint_actions.add_parser(
        "mint",
        help="print an access token from the running dev-idp",
        description=f"{_WARNING}. Print one signed access token (and nothing else) from the "
        "running `engram-memory gateway dev-idp`.",
    )
    mint.add_argument("--sub", required=True, help="the subject (the gateway binds user:<sub>)")
    mint.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME",
        help="a group to put in the `groups` claim (the gateway binds group:<NAME>); repeatable",
    )
    mint.add_argument("--tenant", help="the `tenant` claim (default acme)")
    mint.add_argument("--workspace", help="the `workspace` claim (default support)")
    mint.add_argument("--audience", help="the `aud` claim (default: the dev-idp's --audience)")
    mint.add_argument("--client", help="the `azp` claim: the agent:<client> (default dev-client)")
    mint.add_argument(
        "--scope", action="append", default=[], metavar="SCOPE", help="an OAuth scope; repeatable"
    )
    mint.add_argument(
        "--lifetime", type=int, help="seconds the token lives, 60..86400 (default 3600)"
    )
    mint.add_argument(
        "--expired",
        action="store_true",
        help="a token that expired ten minutes ago, to see the gateway refuse it",
    )
    _state_argument(mint)
    return idp


def _state_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        help="the running dev-idp's state file, its URL and mint secret, 0600 "
        "(default ~/.engram-dev-idp.json)",
    )


def _say(line: str) -> None:
    print(f"engram-memory gateway dev-idp: {line}", file=sys.stderr, flush=True)


_NAME_SHAPE = "letters, digits and ._@- (at most 64, the first a letter or digit)"
# A refused request field: the flag the user gave, and what it must look like.
_FLAGS = {
    "sub": ("--sub", _NAME_SHAPE),
    "client": ("--client", _NAME_SHAPE),
    "groups": ("--group", "letters, digits and ._- (at most 64 each, at most 16 groups)"),
    "scope": ("--scope", "letters, digits and ._:/- (at most 64 each, at most 16 scopes)"),
    "tenant": ("--tenant", "letters, digits and ._- (the first a letter or digit)"),
    "workspace": ("--workspace", "letters, digits and ._- (the first a letter or digit)"),
    "audience": ("--audience", "an http:// or https:// URL"),
    "lifetime_s": ("--lifetime", "60 to 86400 seconds"),
}


def run(args: argparse.Namespace) -> int:
    """The `dev-idp` command: 0, or 2 after one line naming the DEV_IDP_* code."""
    from engram_memory.contract.exceptions import DevIdpRefused
    from engram_memory.gateway.dev_idp_mint import default_state_file

    state_file = Path(args.state) if args.state else default_state_file()
    try:
        if args.dev_idp_command == "mint":
            return _mint(args, state_file)
        return _serve(args, state_file)
    except DevIdpRefused as refused:
        flag = _FLAGS.get(refused.field)
        if flag is None:
            _say(str(refused))
        else:
            _say(f"{refused.code}: {flag[0]} refused: it must be {flag[1]}")
        return EXIT_REFUSED


def _mint(args: argparse.Namespace, state_file: Path) -> int:
    from engram_memory.gateway.dev_idp_mint import read_state, request_token

    request: dict[str, Any] = {"sub": args.sub, "groups": args.group, "scope": args.scope}
    optional = {
        "tenant": args.tenant,
        "workspace": args.workspace,
        "audience": args.audience,
        "client": args.client,
        "lifetime_s": args.lifetime,
    }
    request.update({name: value for name, value in optional.items() if value is not None})
    if args.expired:
        request["expired"] = True
    print(request_token(read_state(state_file), request), flush=True)
    return 0


def _serve(args: argparse.Namespace, state_file: Path) -> int:
    from engram_memory.gateway.dev_idp import DEFAULT_AUDIENCE, DevIdpServer, TokenRequest
    from engram_memory.gateway.dev_idp_mint import DevIdpState, remove_state, write_state

    def minted(request: TokenRequest, kid: str) -> None:
        # Only names the request's shapes admit (dev_idp.py); never the token.
        groups = ",".join(request.groups) or "-"
        ending = "expired" if request.expired else f"lifetime {request.lifetime_s} s"
        _say(f"minted a token: sub {request.sub}, groups {groups}, key {kid}, {ending}")

    server = DevIdpServer(
        args.host, args.port, audience=args.audience or DEFAULT_AUDIENCE, on_mint=minted
    )
    stopped = threading.Event()
    state = DevIdpState(server.issuer, server.idp.mint_secret)
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        write_state(state_file, state)
        for signum in previous:
            signal.signal(signum, lambda _signum, _frame: stopped.set())
        server.start()
        _say(
            f"{_WARNING}: development identity provider at {server.issuer} "
            f"(JWKS {server.issuer}/jwks.json, audience {server.idp.audience}, key "
            f"{server.idp.kid} kept in memory only); mint tokens with `engram-memory gateway "
            f"dev-idp mint --sub NAME` (state file {state_file}); Ctrl-C stops it"
        )
        stopped.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        server.close()
        remove_state(state_file, state)
    _say("stopped")
    return 0
