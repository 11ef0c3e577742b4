"""`engram-memory audit verify`: re-check the chains, every receipt, every row, the anchor.

Auditors run it on a stopped service's data directory or on a checkpointed copy; DuckDB admits
one writer per file, so it never opens the live file of a running service: with
`--tenant/--workspace/--operator`, `audit verify` and `audit export` run inside the server
instead (admin/audit_access.py). It reads every row
of every table (a damaged block fails it) and compares the store with its head anchor (a lost
WAL or a removed tail fails it); with the root key (`--root-key` or ENGRAM_ROOT_KEY) the
anchor's MAC is checked too, and so is the key directory (a live item's key missing or an
ended item's key surviving fails it). The result is one line on stdout; the exit code is 0
when everything verified, 1 for a broken chain, receipt or key directory, 3 for a store
behind its anchor, 4 for a damaged store file.
"""

from __future__ import annotations

import argparse
from typing import Any

from engram_memory.cli import audit_report as audit_report_cli
from engram_memory.cli import checkpoint as checkpoint_cli
from engram_memory.cli import proofs as proofs_cli
from engram_memory.cli.audit_parsers import add_access_arguments, add_query_parsers
from engram_memory.cli.audit_verify import verify_stopped_store


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser("audit", help="auditor tools")
    audit_sub = parser.add_subparsers(dest="audit_command", required=True)
    verify = audit_sub.add_parser("verify", help="verify journal + audit chains and receipts")
    verify.add_argument("--data-dir", default=".engram")
    verify.add_argument(
        "--root-key", help="ENGRAM_ROOT_KEY: also check the head anchor's MAC (optional)"
    )
    add_access_arguments(verify)
    checkpoint_cli.add_verify_flags(verify)
    proofs_cli.add_parsers(audit_sub)
    export = audit_sub.add_parser("export", help="write Parquet + manifest for DuckDB users")
    export.add_argument("--data-dir", default=".engram")
    export.add_argument("--out", required=True, help="output directory")
    export.add_argument(
        "--since", metavar="PREVIOUS_EXPORT_DIR", help="only what follows that export"
    )
    export.add_argument("--json", action="store_true", help="print the manifest")
    export.add_argument(
        "--checkpoint-key",
        help="read-only export of a stopped store: sign the manifest and a checkpoint with "
        "this key (env ENGRAM_CHECKPOINT_KEY); a server signs with its own",
    )
    add_access_arguments(export)
    series = audit_sub.add_parser(
        "verify-export", help="check exports (a full one, then its increments) with files alone"
    )
    series.add_argument("exports", nargs="+", metavar="EXPORT_DIR", help="oldest first")
    checkpoint_cli.add_parsers(audit_sub)
    add_query_parsers(audit_sub)
    audit_report_cli.add_parsers(audit_sub)
    ref = audit_sub.add_parser("principal-ref", help="the hashed principal audit entries hold")
    ref.add_argument("tenant")
    ref.add_argument("principal")
    return parser


def run(args: argparse.Namespace) -> int:
    from engram_memory.admin.audit_access import (
        export_command,
        operator_of,
        verify_command,
        verify_export_command,
    )
    from engram_memory.contract.digests import principal_ref

    if args.audit_command in ("query", "sql"):
        from engram_memory.cli import audit_query as audit_query_cli

        return (
            audit_query_cli.run_query(args)
            if args.audit_command == "query"
            else (audit_query_cli.run_sql(args))
        )
    if args.audit_command == "principal-ref":
        print(principal_ref(args.tenant, args.principal))
        return 0
    if args.audit_command == "verify-export":
        return verify_export_command(args)
    if args.audit_command == "export":
        return export_command(args)  # admin/audit_access.py: through a running server too
    handled = audit_report_cli.run(args)
    if handled is not None:
        return handled
    handled = checkpoint_cli.run(args)
    if handled is None:
        handled = proofs_cli.run(args)
    if handled is not None:
        return handled
    who = operator_of(args)
    return verify_stopped_store(args) if who is None else verify_command(args, who)
