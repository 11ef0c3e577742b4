"""`engram-memory admin ...`: host-only maintenance from the operator's shell.

Runs against the data directory directly (DuckDB admits one writer: stop the server first).
Every command is authorized by `engram.maintenance` for the named human operator, journaled
and audited like an agent call. Results print as JSON; a refusal prints its error code and
exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from engram_memory.admin.maintenance import RECORD_OPERATIONS, MaintenanceService, Operator
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ToolError

_CONFIG_FLAGS = ("data_dir", "host_keys", "root_key", "policy", "bundle")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "admin", help="host-only maintenance (never reachable over MCP)"
    )
    for flag in _CONFIG_FLAGS:
        parser.add_argument(
            f"--{flag.replace('_', '-')}", help=f"as for serve (ENGRAM_{flag.upper()})"
        )
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
    return parser


def _dispatch(
    service: MaintenanceService, who: Operator, args: argparse.Namespace
) -> dict[str, JsonValue]:
    command = args.admin_command
    if command == "adjudicate":
        return service.adjudicate(who, args.candidate_id, args.decision, args.reason)
    if command == "expiry-sweep":
        return service.expiry_sweep(who, lambda line: print(line, file=sys.stderr))
    if command == "history":
        return service.history(who, args.target_id)
    if command == "inspect":
        return service.inspect_candidate(who, args.candidate_id, show_content=args.show_content)
    operation = command.replace("-", "_")
    return service.transition(
        who, operation, args.record_id, args.reason, getattr(args, "successor", None)
    )


def run(args: argparse.Namespace) -> int:
    from engram_memory.app import open_service
    from engram_memory.config import load_config

    config = load_config({flag: getattr(args, flag) for flag in _CONFIG_FLAGS})
    who = Operator(args.tenant, args.workspace, args.operator)
    with open_service(config) as service:
        try:
            output = _dispatch(MaintenanceService(service.services), who, args)
        except ToolError as error:
            print(json.dumps({"ok": False, "code": error.code.name}), file=sys.stdout)
            return 1
    print(json.dumps({"ok": True, "value": output}, indent=2, ensure_ascii=False))
    return 0
