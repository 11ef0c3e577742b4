"""`engram-memory serve | demo | policy | audit | host | admin | import | gateway`.

Configuration problems print one line naming the problem and exit 2, before anything is
written. Nothing here prints secrets, keys or memory content.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from engram_memory._internal.log_lines import EscapingFormatter
from engram_memory._internal.private_files import use_private_umask
from engram_memory.cli.usage import NamingParser, report
from engram_memory.contract.exceptions import (
    CommandLineRefused,
    ConfigurationError,
    EngramError,
    StoreRefusal,
)

EXIT_CONFIG = 2  # configuration unusable; 3: store behind its head anchor; 4: store damaged
# Commands that create store, key, export or backup files: they run under umask 077.
_PRIVATE_COMMANDS = frozenset({"serve", "admin", "audit", "import", "host", "gateway"})

# Only the chosen command's module is imported: `--help` lists the commands from this registry
# alone, and a desktop client launching `serve` or `gateway` pays for nothing else.
# name -> (module, one-line help). Each module offers `add_parser(sub)`, which must build the
# command's parser cheaply (heavy imports belong in its `run(args)`), and `run(args) -> int`.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("engram_memory.cli.serve", "run the MCP server (stdio or streamable HTTP)"),
    "demo": ("engram_memory.cli.demo", "a narrated governed session through the real server"),
    "policy": ("engram_memory.cli.policy", "validate, build, check and verify policy bundles"),
    "audit": ("engram_memory.cli.audit", "auditor tools"),
    "host": ("engram_memory.cli.host", "host key set-up and tokens"),
    "admin": ("engram_memory.cli.admin", "host-only maintenance (never reachable over MCP)"),
    "import": (
        "engram_memory.cli.bulk_import",
        "load JSONL captures for one scope through the tools' own checks, batched",
    ),
    "gateway": (
        "engram_memory.cli.gateway",
        "the signing gateway for stock MCP clients (stdio or OAuth-protected HTTP)",
    ),
}


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (the top-level parser
    has no option taking a value), or None."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with `command`'s own subparser (its module imported) and every other
    command listed from the registry only."""
    parser = NamingParser(prog="engram-memory", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_line) in COMMANDS.items():
        if name == command:
            module = importlib.import_module(module_name)
            run: Callable[[argparse.Namespace], int] = module.run
            module.add_parser(sub).set_defaults(handler=run)
        else:
            sub.add_parser(name, help=help_line)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Every message escaped (log_lines.py): client-supplied values reach the log unformatted
    # by us (the SDK logs a refused Host or Origin header as it came).
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EscapingFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("mcp").setLevel(logging.WARNING)
    raw = list(sys.argv[1:] if argv is None else argv)
    command = chosen_command(raw)
    # An unknown command builds no module's parser; argparse refuses it (exit 2), naming an
    # unknown option when there is one (usage.py).
    parser = build_parser(command if command in COMMANDS else None)
    try:
        args = parser.parse_args(raw)
    except CommandLineRefused as refused:
        report(refused, raw, parser)
    # Whatever DuckDB creates on its own (WAL, temporary files, attached copies) must be as
    # private as the files we create with explicit modes (private_files.py).
    previous_umask = use_private_umask() if args.command in _PRIVATE_COMMANDS else None
    try:
        code: int = args.handler(args)
    except ConfigurationError as exc:
        print(f"engram-memory: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StoreRefusal as exc:
        print(f"engram-memory: {exc}", file=sys.stderr)
        return exc.exit_code
    except EngramError as exc:
        # Our own exceptions carry constant, sanitized text only.
        print(f"engram-memory: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if previous_umask is not None:
            os.umask(previous_umask)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
