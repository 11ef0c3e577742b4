"""`engram-memory admin ...`: host-only maintenance from the operator's shell.

While a server runs on the data directory, commands run inside it over the host-only
maintenance channel (admin/channel.py; DuckDB admits one writer); otherwise against the data
directory directly. Every command is authorized by `engram.maintenance` for the named human
operator, journaled and audited like an agent call. Results print as JSON; a refusal prints
its error code and exits 1. Long operations (expiry sweep, key rotation, backup, restore)
report progress on stderr.

`restore` never opens the configured data directory: it writes a new one (`--to`) and audits
into the restored store's own chain once it verified.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_memory.admin.names import DEFAULT_MAX_AGE_DAYS, RECORD_OPERATIONS
from engram_memory.cli.service_flags import add_service_flags, config_from_flags

if TYPE_CHECKING:
    from engram_memory.admin.maintenance import Operator
    from engram_memory.contract.canonical import JsonValue
    from engram_memory.core.service_config import ServiceConfig


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "admin", help="host-only maintenance (never reachable over MCP)"
    )
    add_service_flags(parser)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--operator", required=True, help="the human acting: human:<subject>")
    commands = parser.add_subparsers(dest="admin_command", required=True)

    adjudicate = commands.add_parser("adjudicate", help="accept or reject a pending candidate")
    adjudicate.add_argument("candidate_id")
    adjudicate.add_argument("--decision", choices=("accept", "reject"), required=True)
    adjudicate.add_argument("--reason", required=True, help="reason reference, e.g. reason:x")

    for operation in RECORD_OPERATIONS:
        command = commands.add_parser(operation.replace("_", "-"), help=f"{operation} a record")
        command.add_argument("record_id")
        command.add_argument("--reason", required=True)
        if operation == "supersede":
            command.add_argument(
                "--successor", required=True, help="the accepted_current successor"
            )

    commands.add_parser("expiry-sweep", help="journal expire for every record past expires_at")
    history = commands.add_parser("history", help="journal history of a candidate or record")
    history.add_argument("target_id")
    inspect = commands.add_parser("inspect", help="a candidate's state and digests")
    inspect.add_argument("candidate_id")
    inspect.add_argument(
        "--show-content", action="store_true", help="open the sealed envelope (audited)"
    )
    commands.add_parser(
        "rotate-scope-key", help="new epoch for this workspace's scope key; re-wrap its keys"
    )
    rotate_root = commands.add_parser(
        "rotate-root-key", help="re-wrap every item key under a new root key"
    )
    rotate_root.add_argument(
        "--new-root-key",
        required=True,
        help="key file from `engram-memory host new-root-key --current ...`",
    )
    commands.add_parser(
        "compact", help="rewrite the store file without deleted rows' residue; shred the old"
    )
    accept_loss = commands.add_parser(
        "accept-loss",
        help="serve a store that lost acknowledged writes again; audit the loss "
        "(docs/operators/backup.md)",
    )
    accept_loss.add_argument("--reason", required=True, help="reason reference, e.g. reason:x")
    backup = commands.add_parser("backup", help="write an encrypted, verifiable archive")
    backup.add_argument("--out", required=True, help="archive file to create")
    restore_cmd = commands.add_parser("restore", help="verify an archive; restore it to --to")
    restore_cmd.add_argument("--from", dest="archive", required=True, help="archive file")
    restore_cmd.add_argument("--to", required=True, help="new or empty data directory")
    restore_cmd.add_argument(
        "--max-age-days",
        type=int,
        default=DEFAULT_MAX_AGE_DAYS,
        help="refuse older archives: they may hold keys destroyed since (default 30)",
    )
    return parser


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: building the parser must stay cheap (cli/main.py).
    from engram_memory.admin.channel import send_command
    from engram_memory.admin.commands import AdminCommand, execute
    from engram_memory.admin.maintenance import Operator
    from engram_memory.contract.exceptions import ToolError
    from engram_memory.server.app import open_service

    config = config_from_flags(args)
    who = Operator(args.tenant, args.workspace, args.operator)
    try:
        if args.admin_command == "restore":
            output = _restore(config, who, args)
        else:
            command = AdminCommand.from_values(args.admin_command, who, vars(args))
            # A running server holds the store: the command runs inside it.
            running = send_command(config.data_dir, command, _progress)
            if running is not None:
                output = running
            else:
                # Only accept-loss may open a store that is behind its head anchor.
                tolerate = args.admin_command == "accept-loss"
                with open_service(config, tolerate_loss=tolerate) as service:
                    output = execute(service.services, command, _progress)
    except ToolError as error:
        print(json.dumps({"ok": False, "code": error.code.name}), file=sys.stdout)
        return 1
    print(json.dumps({"ok": True, "value": output}, indent=2, ensure_ascii=False))
    return 0


def _restore(
    config: ServiceConfig, who: Operator, args: argparse.Namespace
) -> dict[str, JsonValue]:
    from engram_memory.admin.restore import RestoreRequest, restore
    from engram_memory.crypto.keys import RootKey
    from engram_memory.host.keys import HostKeyring
    from engram_memory.policy.decider import PolicyDecider
    from engram_memory.policy.factory import open_policy_engine

    root = RootKey.load(config.root_key)
    host_keys = HostKeyring.from_file(config.host_keys, config.store_audience)

    def clock_ms() -> int:
        return time.time_ns() // 1_000_000

    with open_policy_engine(
        config.policy, config.bundle, verification_key=config.bundle_verification_key
    ) as (engine, identity):
        request = RestoreRequest(
            root=root,
            decider=PolicyDecider(engine, identity, clock_ms),
            host_keys=host_keys,
            clock_ms=clock_ms,
            max_age_days=args.max_age_days,
        )
        return restore(request, who, Path(args.archive), Path(args.to), _progress)
