"""`engram-memory audit verify`: re-check the journal chains, the audit chain and every receipt.

Auditors run it on a stopped service's data directory or on a checkpointed copy; DuckDB admits
one writer per file, so it never opens the live file of a running service.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engram_memory.contract.digests import principal_ref
from engram_memory.store import audit, journal
from engram_memory.store.database import Database
from engram_memory.store.export import export_tables
from engram_memory.tools.key_recovery import audit_key_directory


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser("audit", help="auditor tools")
    audit_sub = parser.add_subparsers(dest="audit_command", required=True)
    verify = audit_sub.add_parser("verify", help="verify journal + audit chains and receipts")
    verify.add_argument("--data-dir", default=".engram")
    export = audit_sub.add_parser("export", help="write Parquet + manifest for DuckDB users")
    export.add_argument("--data-dir", default=".engram")
    export.add_argument("--out", required=True, help="output directory")
    ref = audit_sub.add_parser("principal-ref", help="the hashed principal audit entries hold")
    ref.add_argument("tenant")
    ref.add_argument("principal")
    return parser


def verify_data_dir(data_dir: Path) -> tuple[int, int, int]:
    """Returns (journal events, audit entries, receipts) verified.

    Raises:
        JournalCorrupt / AuditChainBroken: the first defect found.
    """
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            events = sum(journal.verify_scope(tx, scope) for scope in journal.scopes(tx))
            entries, receipts = audit.verify(tx)
    finally:
        database.close()
    return events, entries, receipts


def export_data_dir(data_dir: Path, out_dir: Path) -> dict[str, object]:
    """Verify, then export; an export of a broken chain is refused.

    Raises:
        JournalCorrupt / AuditChainBroken: verification failed; nothing is exported.
    """
    verify_data_dir(data_dir)
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            return export_tables(tx, out_dir, lambda line: print(line, file=sys.stderr))
    finally:
        database.close()


def run(args: argparse.Namespace) -> int:
    if args.audit_command == "principal-ref":
        print(principal_ref(args.tenant, args.principal))
        return 0
    if args.audit_command == "export":
        export_data_dir(Path(args.data_dir), Path(args.out))
        return 0
    events, entries, receipts = verify_data_dir(Path(args.data_dir))
    keys = audit_key_directory(Path(args.data_dir))
    print(
        f"ok: {events} journal events, {entries} audit entries, "
        f"{receipts} decision receipts, {keys.key_files} key files verified",
        file=sys.stderr,
    )
    return 0
