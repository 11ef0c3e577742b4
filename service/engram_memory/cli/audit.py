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
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_memory.cli import audit_report as audit_report_cli
from engram_memory.cli import checkpoint as checkpoint_cli
from engram_memory.cli import proofs as proofs_cli
from engram_memory.cli.audit_parsers import add_access_arguments, add_query_parsers
from engram_memory.contract.exceptions import (
    ConfigurationError,
    StoreBehindAnchor,
    StoreDamaged,
    StoreRefusal,
)

if TYPE_CHECKING:
    from engram_memory.crypto.keys import RootKey
    from engram_memory.store.anchors import AnchorFile

EXIT_CHAIN_BROKEN = 1


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


def _anchor_for(data_dir: Path, root_key: str | None) -> AnchorFile:
    """The data directory's anchor, authenticated when a root key file is named.

    Raises:
        ConfigurationError: the named root key file is unusable.
    """
    from engram_memory.crypto.keys import RootKey
    from engram_memory.store.anchors import AnchorFile

    key_path = root_key or os.environ.get("ENGRAM_ROOT_KEY")
    key = None if not key_path else RootKey.load(Path(key_path)).head_anchor_key()
    return AnchorFile(data_dir, key)


def _root_key(root_key: str | None) -> RootKey | None:
    """The root key ring of `--root-key` or ENGRAM_ROOT_KEY, if either names one: with it
    every key file is authenticated, not only shape-checked."""
    from engram_memory.crypto.keys import RootKey

    key_path = root_key or os.environ.get("ENGRAM_ROOT_KEY")
    return RootKey.load(Path(key_path)) if key_path else None


def _verify_command(args: argparse.Namespace) -> int:
    """`audit verify`: the result on stdout, one line; diagnostics stay on stderr."""
    # Imported here, not at the top: building the parser must stay cheap (cli/main.py).
    from engram_memory.admin.verification import verify_store
    from engram_memory.contract.exceptions import (
        AuditChainBroken,
        JournalCorrupt,
        KeyDirectoryInconsistent,
        OpenFailure,
        StoreCorrupt,
        StoreOpenFailed,
    )
    from engram_memory.core.key_recovery import audit_key_directory

    data_dir = Path(args.data_dir)
    try:
        root = _root_key(args.root_key)
        verified = verify_store(
            data_dir,
            _anchor_for(data_dir, args.root_key),
            None if root is None else root.call_log_key(),
        )
    except (JournalCorrupt, AuditChainBroken) as exc:
        print(f"FAILED: {type(exc).__name__}: {exc}")
        return EXIT_CHAIN_BROKEN
    except StoreCorrupt:
        print(f"FAILED: {StoreDamaged(f'store file in {data_dir} is damaged')}")
        return StoreDamaged.exit_code
    except StoreOpenFailed as exc:
        refusal: StoreRefusal | ConfigurationError = (
            StoreDamaged(exc.line)
            if exc.failure is OpenFailure.DAMAGED
            else ConfigurationError(exc.line)
        )
        print(f"FAILED: {refusal}")
        return refusal.exit_code if isinstance(refusal, StoreRefusal) else 2
    except StoreBehindAnchor as exc:
        print(f"FAILED: {exc}")
        if args.checkpoint:  # what the checkpoint says about the loss, too
            print("\n".join(_checkpoint(args)[1]))
        return exc.exit_code
    try:
        keys = audit_key_directory(data_dir, _root_key(args.root_key))
    except KeyDirectoryInconsistent as exc:
        print(f"FAILED: {type(exc).__name__}: {exc}")
        return EXIT_CHAIN_BROKEN
    extends = ""
    if args.checkpoint:
        code, lines = _checkpoint(args)
        if code:
            print("\n".join(lines))
            return code
        extends = "; " + "; ".join(lines)
    print(
        f"ok: {verified.events} journal events, {verified.entries} audit entries, "
        f"{verified.receipts} decision receipts, {verified.rows} rows in {verified.tables} "
        f"tables, {keys.key_files} key files verified; head anchor {verified.anchor}{extends}"
    )
    return 0


def _checkpoint(args: argparse.Namespace) -> tuple[int, list[str]]:
    from engram_memory.admin.checkpointing import checkpoint_lines

    return checkpoint_lines(Path(args.data_dir), Path(args.checkpoint), args.checkpoint_public_key)


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
    return _verify_command(args) if who is None else verify_command(args, who)
