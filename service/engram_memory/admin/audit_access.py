"""Audit access while the service runs: `audit export` and `audit verify` on a live store.

DuckDB admits one writer per file, so while a server holds the data directory the auditor's
command runs inside it, over the maintenance channel (admin/channel.py, commands
`audit-export` / `audit-verify`), as a named human operator with `read` authority in every
scope of the store (the trail covers them all), and is audited like any maintenance command:
who exported, which sequences, which previous export it continues. With no server, a named
operator's command opens the service itself (and is audited the same way); without an
operator, the store is opened read-only as before (nothing can be written, so nothing is
audited), which only works on a stopped service or a copy.

Both read from ONE read transaction on a cursor of their own (`Database.reading`, DuckDB
MVCC): the chains verified, the rows exported and the heads in the manifest are the same
instant, and agents' calls go on meanwhile (their writer lock is never taken). The export
first verifies every chain and receipt in that snapshot and refuses a broken one; an
incremental export also checks that the store still extends the previous export
(store/export_chain.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from engram_memory.admin.audit_service import (
    CHAIN_DEFECTS,
    EXPORT_COMMAND,
    VERIFY_COMMAND,
    SnapshotVerified,
    export_from,
    export_range,
    sequence_span,
)
from engram_memory.admin.channel import send_command
from engram_memory.admin.commands import AdminCommand, execute
from engram_memory.admin.maintenance import Operator
from engram_memory.admin.verification import project_call_log
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    AuditAccessFailed,
    ConfigurationError,
    ExportChainBroken,
    OpenFailure,
    StoreDamaged,
    StoreOpenFailed,
    ToolError,
)
from engram_memory.crypto.checkpoint_key import PUBLIC_KEY_VARIABLE, CheckpointSigningKey
from engram_memory.crypto.keys import RootKey
from engram_memory.store.database import Database
from engram_memory.store.export_verify import verify_series


def export_snapshot(
    data_dir: Path,
    out_dir: Path,
    *,
    since_sequence: int | None,
    progress: Callable[[str], None],
    previous: Path | None = None,
    who: Operator | None = None,
    key: CheckpointSigningKey | None = None,
) -> dict[str, object]:
    """Export the audit trail of `data_dir` to `out_dir`; return the manifest. Runs inside
    the server holding `data_dir` when one does (then `who` is required), else opens the
    store: as the service when `who` is named (audited), read-only otherwise. A server, or
    the service opened here, signs with its own checkpoint key; a read-only export signs
    with `key` when one is given.

    Raises:
        AuditAccessFailed: a chain does not verify or the store does not extend `previous`.
        ConfigurationError: a server holds the store and no operator is named; a bad range;
            the service's configuration is unusable.
        ToolError: the server's refusal (UNAUTHORIZED without `read` authority, ...).
        StoreOpenFailed: the store cannot be opened.
    """
    operands = {
        "out": str(out_dir.absolute()),
        "previous": "" if previous is None else str(previous.absolute()),
        "since_sequence": "" if since_sequence is None else str(since_sequence),
    }
    if previous is not None and previous.resolve() == out_dir.resolve():
        raise ConfigurationError("--out must not be the previous export it continues")
    if who is not None:
        value = _run_as(who, data_dir, EXPORT_COMMAND, operands, progress)
        manifest = value.get("manifest")
        if not isinstance(manifest, dict):
            raise AuditAccessFailed(str(value.get("failure", "export failed")))
        return dict(manifest)
    span = export_range(since_sequence, previous)
    database = _open_stopped(data_dir)
    try:
        return export_from(database, out_dir, span, progress, key)[0]
    except CHAIN_DEFECTS as exc:
        raise AuditAccessFailed(f"{type(exc).__name__}: {exc}") from exc
    finally:
        database.close()


def verify_live(
    data_dir: Path,
    who: Operator,
    progress: Callable[[str], None],
    checkpoint: Path | None = None,
    public_key: str | None = None,
) -> tuple[SnapshotVerified, tuple[int, list[str]] | None]:
    """`audit verify` of the store a server holds, inside it (or of a stopped one, opened
    as the service), as `who`; with `checkpoint`, the same snapshot is compared with it.
    Returns what was verified and, with a checkpoint, (exit code, lines) of the comparison.

    Raises:
        AuditAccessFailed: the first defect found.
        ToolError / ConfigurationError / StoreOpenFailed: as for `export_snapshot`.
    """
    key_path = public_key or os.environ.get(PUBLIC_KEY_VARIABLE) or ""
    operands = {
        # The server opens these files: absolute, as every path operand travels.
        "checkpoint": "" if checkpoint is None else str(checkpoint.absolute()),
        "checkpoint_public_key": str(Path(key_path).absolute()) if key_path else "",
    }
    value = _run_as(who, data_dir, VERIFY_COMMAND, operands, progress)
    verified = value.get("verified")
    if not isinstance(verified, dict):
        raise AuditAccessFailed(str(value.get("failure", "verification failed")))
    snapshot = SnapshotVerified(
        *(
            int(str(verified[key]))
            for key in (
                "journal_events",
                "audit_entries",
                "decision_receipts",
                "tables",
                "rows",
                "audit_sequence",
            )
        )
    )
    compared = value.get("checkpoint")
    if not isinstance(compared, dict):
        return snapshot, None
    lines = compared.get("lines")
    return snapshot, (
        int(str(compared.get("exit", 1))),
        [str(line) for line in lines] if isinstance(lines, list) else [],
    )


def _run_as(
    who: Operator,
    data_dir: Path,
    name: str,
    operands: dict[str, str],
    progress: Callable[[str], None],
) -> dict[str, JsonValue]:
    """Run command `name` in the server of `data_dir`, or in a service opened here.

    Raises:
        ToolError / ConfigurationError: the refusal.
    """
    from engram_memory.core.opening import open_services  # opened only on this path
    from engram_memory.core.service_config import load_config

    command = AdminCommand.from_values(name, who, operands)
    running = send_command(data_dir, command, progress)
    if running is not None:
        return running
    with open_services(load_config({"data_dir": str(data_dir)})) as services:
        return execute(services, command, progress)


def _open_stopped(data_dir: Path) -> Database:
    """The store of a stopped service, read-only (with ENGRAM_ROOT_KEY set, after its call
    log's pending records were written into it: admin/verification.py `project_call_log`).

    Raises:
        ConfigurationError: a server holds it (name an operator to go through the server).
        StoreOpenFailed: it cannot be opened for another reason.
    """
    try:
        root_key = os.environ.get("ENGRAM_ROOT_KEY")
        if root_key:  # what the call log acknowledged and the file lacks is exported too
            project_call_log(data_dir, RootKey.load(Path(root_key)).call_log_key())
        return Database.open(data_dir, read_only=True)
    except StoreOpenFailed as exc:
        if exc.failure is OpenFailure.HELD:
            raise ConfigurationError(
                f"a running server holds {data_dir}: name the auditor with --tenant, "
                "--workspace and --operator (read authority) to go through its maintenance "
                "channel"
            ) from exc
        raise


# -- the shell: `engram-memory audit export | verify` ------------------------------------

EXIT_DEFECT = 1  # a chain, receipt or previous export that does not verify
EXIT_REFUSED = 5  # the server or policy refused the operator (the code is printed)


def _refused(error: ToolError) -> int:
    """Print the refusal's code; a damaged store file exits as `audit verify` says (4)."""
    print(json.dumps({"ok": False, "code": error.code.name}))
    return StoreDamaged.exit_code if error.code is ErrorCode.JOURNAL_CORRUPT else EXIT_REFUSED


def operator_of(args: argparse.Namespace) -> Operator | None:
    """The operator the flags name, or None when none of the three is given.

    Raises:
        ConfigurationError: only some of them are given.
    """
    named = (args.tenant, args.workspace, args.operator)
    if all(value is None for value in named):
        return None
    if any(value is None for value in named):
        raise ConfigurationError("--tenant, --workspace and --operator go together")
    return Operator(args.tenant, args.workspace, args.operator)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def export_command(args: argparse.Namespace) -> int:
    """`audit export`: progress on stderr, one summary line (or `--json`, the manifest) on
    stdout; exit 0, 1 for a defect (nothing exported), 4 for a damaged store file, 5 for a
    refusal.

    Raises:
        ConfigurationError / StoreRefusal: printed by the CLI as one line.
    """
    previous = None if args.since is None else Path(args.since)
    key_path = args.checkpoint_key or os.environ.get("ENGRAM_CHECKPOINT_KEY")
    key = CheckpointSigningKey.from_pem_file(Path(key_path)) if key_path else None
    try:
        manifest = export_snapshot(
            Path(args.data_dir),
            Path(args.out),
            since_sequence=None,
            progress=_progress,
            previous=previous,
            who=operator_of(args),
            key=key,
        )
    except AuditAccessFailed as exc:
        print(f"FAILED: {exc}")
        return EXIT_DEFECT
    except ToolError as error:
        return _refused(error)
    if args.json:
        print(json.dumps(manifest, indent=2))
        return 0
    head = manifest.get("audit_head")
    last = head.get("sequence", 0) if isinstance(head, dict) else 0
    files = manifest.get("files")
    rows = ", ".join(
        f"{f['rows']} {str(f['name']).removesuffix('.parquet')}"
        for f in (files if isinstance(files, list) else [])
        if isinstance(f, dict)
    )
    since = manifest.get("since_sequence", 0)
    span = sequence_span(int(str(since)), int(str(last)))
    print(f"ok: exported audit sequences {span} ({rows}) to {args.out}")
    return 0


def verify_command(args: argparse.Namespace, who: Operator) -> int:
    """`audit verify` as `who` (inside a running server): one line on stdout; exit 0, 1 for
    a defect, 4 for a damaged store file, 5 for a refusal.

    Raises:
        ConfigurationError / StoreRefusal: printed by the CLI as one line.
    """
    checkpoint = None if args.checkpoint is None else Path(args.checkpoint)
    try:
        verified, compared = verify_live(
            Path(args.data_dir), who, _progress, checkpoint, args.checkpoint_public_key
        )
    except AuditAccessFailed as exc:
        print(f"FAILED: {exc}")
        return EXIT_DEFECT
    except ToolError as error:
        return _refused(error)
    if compared is not None and compared[0] != 0:
        print("\n".join(compared[1]))
        return compared[0]
    extends = "" if compared is None else "; " + "; ".join(compared[1])
    print(
        f"ok: {verified.events} journal events, {verified.entries} audit entries, "
        f"{verified.receipts} decision receipts, {verified.rows} rows in {verified.tables} "
        "tables verified in one snapshot; head anchor and key directory not checked (a "
        f"stopped service's `audit verify` without --operator checks them){extends}"
    )
    return 0


def verify_export_command(args: argparse.Namespace) -> int:
    """`audit verify-export DIR...`: one line on stdout; exit 0, or 1 for the first defect.

    Raises:
        ConfigurationError: a directory holds no readable manifest (printed by the CLI).
    """
    try:
        verified = verify_series([Path(d) for d in args.exports])
    except ExportChainBroken as exc:
        print(f"FAILED: {exc}")
        return EXIT_DEFECT
    print(
        f"ok: {verified.exports} export(s) form one chain up to audit sequence "
        f"{verified.audit_sequence}: {verified.entries} audit entries, {verified.receipts} "
        f"decision receipts, {verified.events} journal events re-derived"
    )
    return 0
