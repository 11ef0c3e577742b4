"""`engram-memory audit verify`: re-check the journal chains, the audit chain and every receipt.

Auditors run it on a stopped service's data directory or on a checkpointed copy; DuckDB admits
one writer per file, so it never opens the live file of a running service.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engram_memory.store import audit, journal
from engram_memory.store.database import Database


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser("audit", help="auditor tools")
    audit_sub = parser.add_subparsers(dest="audit_command", required=True)
    verify = audit_sub.add_parser("verify", help="verify journal + audit chains and receipts")
    verify.add_argument("--data-dir", default=".engram")
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


def run(args: argparse.Namespace) -> int:
    events, entries, receipts = verify_data_dir(Path(args.data_dir))
    print(
        f"ok: {events} journal events, {entries} audit entries, "
        f"{receipts} decision receipts verified",
        file=sys.stderr,
    )
    return 0
