"""`engram-memory audit report` and `audit pack`: evidence an auditor hands to a regulator.

`audit report --from T1 --to T2 --out DIR (--data-dir D | --export E)` writes DIR/report.html
(inline CSS, no script) and its PNG plots beside it: every figure is a named query's answer
for the period (admin/report_data.py). `audit pack --from T1 --to T2 --out DIR --data-dir D`
writes the export, the report, the policy text of the revisions in force, the `audit verify`
transcript and the checkpoints under a signed manifest (admin/audit_pack.py); `audit pack
--verify DIR` checks it with the files and the public key alone.

Like `audit export` without an operator, both open a stopped store read-only. Progress goes
to stderr, one result line to stdout. Exit codes: 0 done (or the pack verified); 1 the store
or export does not verify, or a pack file differs from its manifest; 2 bad usage or an
unreadable file or key; 5 a pack manifest not signed by the given key.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_memory.crypto.checkpoint_key import PUBLIC_KEY_VARIABLE, CheckpointSigningKey

EXIT_DEFECT = 1
EXIT_USAGE = 2
EXIT_UNTRUSTED = 5


def _add_period(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="start", help="ISO 8601, inclusive (default: the start)")
    parser.add_argument("--to", dest="end", help="ISO 8601, exclusive (default: now)")
    parser.add_argument(
        "--identities",
        type=Path,
        metavar="FILE.csv",
        help="show hashed principals as names: CSV principal_id,display_name,groups[,tenant]",
    )
    parser.add_argument("--root-key", help="ENGRAM_ROOT_KEY: also check the head anchor's MAC")


def add_parsers(audit_sub: Any) -> None:
    """Register `report` and `pack` under `engram-memory audit`."""
    report = audit_sub.add_parser("report", help="an HTML report of a period, with plots")
    report.add_argument("--out", type=Path, required=True, help="directory for report.html")
    source = report.add_mutually_exclusive_group(required=True)
    source.add_argument("--data-dir", type=Path, help="a stopped service's data directory")
    source.add_argument("--export", type=Path, help="an audit export directory")
    report.add_argument(
        "--checkpoint-public-key", help=f"check kept checkpoints (env {PUBLIC_KEY_VARIABLE})"
    )
    _add_period(report)
    pack = audit_sub.add_parser("pack", help="export + report + policies under a signed manifest")
    pack.add_argument("--out", type=Path, help="the pack directory to write (must not exist)")
    pack.add_argument("--data-dir", type=Path, default=Path(".engram"))
    pack.add_argument(
        "--checkpoint-key", help="the checkpoint private key (env ENGRAM_CHECKPOINT_KEY)"
    )
    pack.add_argument(
        "--bundle",
        action="append",
        default=[],
        type=Path,
        help="a bundle directory whose policy text to include if it was in force (repeatable)",
    )
    pack.add_argument("--verify", type=Path, metavar="PACK_DIR", help="check a pack and exit")
    pack.add_argument(
        "--checkpoint-public-key",
        help=f"for --verify: the key you kept (env {PUBLIC_KEY_VARIABLE})",
    )
    _add_period(pack)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _fail(line: str, code: int) -> int:
    print(f"engram-memory: {line}", file=sys.stderr)
    return code


def _period(args: argparse.Namespace) -> tuple[datetime | None, datetime]:
    """Raises: QueryUsageError: a bad instant, or an empty range."""
    from engram_memory.admin.audit_queries import parse_timestamp
    from engram_memory.contract.exceptions import QueryUsageError

    start = None if args.start is None else parse_timestamp(args.start)
    end = datetime.now(UTC).replace(tzinfo=None) if args.end is None else parse_timestamp(args.end)
    if start is not None and end <= start:
        raise QueryUsageError("the range is empty: --to (exclusive) must be after --from")
    return start, end


def verify_transcript(
    data_dir: Path, root_key: str | None, checkpoint: Path | None, public_key: str | None
) -> tuple[int, list[str]]:
    """`audit verify` of the stopped store, as it prints: (exit code, transcript lines)."""
    from engram_memory.cli.audit_verify import verify_stopped_store

    argv = ["audit", "verify", "--data-dir", str(data_dir)]
    if checkpoint is not None and public_key:
        argv += ["--checkpoint", str(checkpoint), "--checkpoint-public-key", public_key]
    namespace = argparse.Namespace(
        data_dir=str(data_dir),
        root_key=root_key,
        checkpoint=None if len(argv) == 4 else str(checkpoint),
        checkpoint_public_key=public_key,
    )
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = verify_stopped_store(namespace)
    return code, [
        f"$ engram-memory {' '.join(argv)}",
        *captured.getvalue().splitlines(),
        f"exit {code}",
    ]


def _checkpoint_lines(paths: list[Path], public_key: str | None) -> list[str]:
    """One line per kept checkpoint: its signature checked when a public key is at hand."""
    import json

    from engram_memory.contract.exceptions import CheckpointInvalid
    from engram_memory.core.checkpoints import verify_signature
    from engram_memory.crypto.checkpoint_key import CheckpointPublicKey

    key = None if not public_key else CheckpointPublicKey.from_pem_file(Path(public_key))
    lines = [f"{len(paths)} checkpoint(s) kept by the store were signed in the period"]
    for path in paths:
        document = json.loads(path.read_text(encoding="utf-8"))
        what = f"{path.name}: signed {document.get('signed_at')}"
        if key is None:
            lines.append(f"{what}: signature not checked (no public key given)")
            continue
        try:
            verify_signature(document, key)
        except CheckpointInvalid as exc:
            lines.append(f"FAILED: {what}: {exc}")
            continue
        lines.append(f"{what}: signature verified (key {key.key_id})")
    return lines


def write_report(
    out_dir: Path,
    export_dir: Path | None,
    data_dir: Path | None,
    period: tuple[datetime | None, datetime],
    identities: Path | None,
    verification: list[str],
) -> tuple[Path, str | None]:
    """Write report.html and its plots into `out_dir`: (the file, the plot note)."""
    from engram_memory.admin.audit_views import opened_source
    from engram_memory.admin.identities import identity_map, load_identities
    from engram_memory.admin.report_data import SECTIONS, ReportData, gather
    from engram_memory.admin.report_html import render_report
    from engram_memory.admin.report_plots import plots

    if identities is not None:
        load_identities(identities)  # a bad file fails before the export is taken
    with opened_source(export_dir, data_dir) as con:
        scopes = [
            row[0] for row in con.execute("SELECT DISTINCT scope_ref FROM audit_entries").fetchall()
        ]
        _progress(f"report: answering {len(SECTIONS)} named queries")
        answers = gather(con, period[0], period[1], identity_map(identities, scopes))
    out_dir.mkdir(parents=True, exist_ok=True)
    images, note = plots(answers, out_dir)
    if note:
        _progress(note)
    data = ReportData(period[0], period[1], answers, verification)
    target = out_dir / "report.html"
    html = render_report(data, images, note, datetime.now(UTC).replace(tzinfo=None))
    target.write_text(html, encoding="utf-8")
    return target, note


def _report_command(args: argparse.Namespace) -> int:
    from engram_memory.admin.audit_pack import write_checkpoints
    from engram_memory.store.export_verify import verify_series

    period = _period(args)
    public_key = args.checkpoint_public_key or os.environ.get(PUBLIC_KEY_VARIABLE)
    if args.export is not None:
        verified = verify_series([args.export])
        lines = [
            f"$ engram-memory audit verify-export {args.export}",
            f"ok: export forms one chain up to audit sequence {verified.audit_sequence}",
        ]
    else:
        _progress("report: verifying the store")
        code, lines = verify_transcript(args.data_dir, args.root_key, None, None)
        if code != 0:
            print("\n".join(lines[1:-1]))
            return code
        with tempfile.TemporaryDirectory(prefix="engram-report-") as scratch:
            kept = write_checkpoints(args.data_dir, period[0], period[1], Path(scratch))
            lines += _checkpoint_lines(kept, public_key)
    target, _ = write_report(args.out, args.export, args.data_dir, period, args.identities, lines)
    print(f"ok: wrote {target}")
    return 0


def _pack_command(args: argparse.Namespace) -> int:
    if args.out is None:
        return _fail("audit pack: --out DIR is required (or --verify DIR)", EXIT_USAGE)
    key_path = args.checkpoint_key or os.environ.get("ENGRAM_CHECKPOINT_KEY")
    if not key_path:
        return _fail("audit pack: --checkpoint-key (or ENGRAM_CHECKPOINT_KEY) is required", 2)
    if args.out.exists():
        return _fail(f"audit pack: {args.out} exists; name a new directory", EXIT_USAGE)
    period = _period(args)
    if args.identities is not None:
        from engram_memory.admin.identities import load_identities

        load_identities(args.identities)  # a bad file fails before anything is written
    key = CheckpointSigningKey.from_pem_file(Path(key_path))
    out: Path = args.out
    out.mkdir(parents=True)
    try:
        code = _write_pack(args, out, key, period)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # never leave half a pack behind
        raise
    if code != 0:
        shutil.rmtree(out, ignore_errors=True)
    return code


def _write_pack(
    args: argparse.Namespace,
    out: Path,
    key: CheckpointSigningKey,
    period: tuple[datetime | None, datetime],
) -> int:
    """Write every part of the pack into `out`, then its signed manifest."""
    from engram_memory.admin.audit_access import export_snapshot
    from engram_memory.admin.audit_pack import sign_pack, write_checkpoints, write_policy_texts
    from engram_memory.core.checkpoints import CHECKPOINT_FILE
    from engram_memory.policy.authoring.default_bundle import default_bundle_dir

    public = out / "checkpoint-public.pem"
    public.write_text(key.public.pem(), encoding="utf-8")
    _progress("pack: exporting the audit trail (verified first)")
    export_snapshot(args.data_dir, out / "export", since_sequence=None, progress=_progress, key=key)
    kept = write_checkpoints(args.data_dir, period[0], period[1], out)
    _progress("pack: verifying the store against the export's checkpoint")
    code, lines = verify_transcript(
        args.data_dir, args.root_key, out / "export" / CHECKPOINT_FILE, str(public)
    )
    lines += _checkpoint_lines(kept, str(public))
    (out / "verification.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if code != 0:
        print("\n".join(lines[1:-1]))
        return code
    _, _ = write_report(out / "report", out / "export", None, period, args.identities, lines)
    revisions = _revisions_in_force(out / "export", period)
    bundles = {"shipped": default_bundle_dir(), **{str(b): b for b in args.bundle}}
    texts = write_policy_texts(revisions, bundles, out)
    manifest = sign_pack(out, key, period, texts)
    missing = [t.revision for t in texts if t.directory is None]
    files = manifest["files"]
    print(
        f"ok: wrote {out}: {len(files) if isinstance(files, list) else 0} files signed by key "
        f"{key.key_id}; policy text of {len(texts) - len(missing)} of {len(texts)} revisions"
        + (f" (not at hand: {', '.join(missing)})" if missing else "")
    )
    return 0


def _revisions_in_force(
    export_dir: Path, period: tuple[datetime | None, datetime]
) -> list[tuple[str, str]]:
    from engram_memory.admin.audit_queries import load_named_queries
    from engram_memory.admin.audit_views import open_export

    con = open_export(export_dir)
    try:
        sql = load_named_queries()["revisions_in_force"].sql
        rows = con.execute(sql, {"from": period[0], "to": period[1]}).fetchall()
    finally:
        con.close()
    return [(str(row[0]), str(row[1])) for row in rows]


def _verify_pack_command(args: argparse.Namespace) -> int:
    from engram_memory.admin.audit_pack import verify_pack
    from engram_memory.crypto.checkpoint_key import CheckpointPublicKey

    key_path = args.checkpoint_public_key or os.environ.get(PUBLIC_KEY_VARIABLE)
    if not key_path:
        return _fail(
            "audit pack --verify: --checkpoint-public-key (the key you kept) is required", 2
        )
    problems, lines = verify_pack(args.verify, CheckpointPublicKey.from_pem_file(Path(key_path)))
    print("\n".join(lines))
    return EXIT_DEFECT if problems else 0


def run(args: argparse.Namespace) -> int | None:
    """Run `report` or `pack`; None for any other audit command."""
    from engram_memory.contract.exceptions import (
        AuditAccessFailed,
        CheckpointInvalid,
        ExportChainBroken,
        ExportTampered,
        ExportUnusable,
        QueryUsageError,
    )

    if args.audit_command not in ("report", "pack"):
        return None
    command = f"audit {args.audit_command}"
    try:
        if args.audit_command == "report":
            return _report_command(args)
        return _verify_pack_command(args) if args.verify is not None else _pack_command(args)
    except (QueryUsageError, ExportUnusable) as exc:
        return _fail(f"{command}: {exc}", EXIT_USAGE)
    except (AuditAccessFailed, ExportTampered, ExportChainBroken) as exc:
        print(f"FAILED: {exc}")
        return EXIT_DEFECT
    except CheckpointInvalid as exc:
        print(f"FAILED: not trusted: {exc}")
        return EXIT_UNTRUSTED
