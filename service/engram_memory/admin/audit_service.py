"""The auditor's commands as the service runs them: `audit-export` and `audit-verify`.

These are maintenance-channel commands (admin/commands.py), so a running server executes
them for `engram-memory audit export | verify` (admin/audit_access.py is the client side).
Each needs `read` authority in every scope of the store: the audit trail and the journals
cover all of them. Each is audited like any maintenance command (tool `admin:audit_export`
or `admin:audit_verify`, the operator's hashed principal): the export's entry names the
sequences it holds, the previous export it continues and the manifest's files; a refused
or failed one is audited with its outcome.

The work runs in one read transaction on a cursor of its own (`Database.reading`): agents'
calls take the writer lock meanwhile and are never blocked by it, and nothing they commit
is in the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engram_memory.admin.checkpointing import checkpoint_lines_in
from engram_memory.admin.maintenance import (
    Operator,
    Progress,
    authorize_operator,
    run_authorized,
)
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    AuditChainBroken,
    ConfigurationError,
    ExportChainBroken,
    JournalCorrupt,
)
from engram_memory.core import steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.checkpoints import export_signed, keep_checkpoint, wall_clock_ms
from engram_memory.core.runtime import CallContext, Services
from engram_memory.crypto.checkpoint_key import CheckpointSigningKey
from engram_memory.store import audit, inventory, journal
from engram_memory.store.database import Database
from engram_memory.store.export_chain import ExportRange, PreviousExport
from engram_memory.store.integrity import read_every_row
from engram_memory.store.transaction import Transaction

EXPORT_COMMAND = "audit-export"
VERIFY_COMMAND = "audit-verify"
# What a chain defect raises: reported as a failed verification, and nothing is exported.
CHAIN_DEFECTS = (JournalCorrupt, AuditChainBroken, ExportChainBroken)


@dataclass(frozen=True)
class SnapshotVerified:
    """What a verification of one snapshot checked."""

    events: int
    entries: int
    receipts: int
    tables: int
    rows: int
    audit_sequence: int

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "journal_events": self.events,
            "audit_entries": self.entries,
            "decision_receipts": self.receipts,
            "tables": self.tables,
            "rows": self.rows,
            "audit_sequence": self.audit_sequence,
        }


def verify_snapshot(tx: Transaction) -> SnapshotVerified:
    """Read every row, re-derive every journal chain, the audit chain and every receipt, all
    in `tx`.

    Raises:
        JournalCorrupt / AuditChainBroken: the first defect found.
        StoreCorrupt: a block failed its checksum.
        StoreUnavailable: a query failed.
    """
    tables, rows = read_every_row(tx)
    events = sum(journal.verify_scope(tx, scope) for scope in journal.scopes(tx))
    entries, receipts = audit.verify(tx)
    return SnapshotVerified(events, entries, receipts, tables, rows, entries)


def export_from(
    database: Database,
    out_dir: Path,
    span: ExportRange,
    progress: Callable[[str], None],
    key: CheckpointSigningKey | None = None,
    now_ms: int | None = None,
) -> tuple[dict[str, object], dict[str, JsonValue] | None]:
    """Verify, check the previous export is extended, and export, in one read snapshot;
    with `key`, the manifest is signed and the export holds a signed checkpoint of the same
    snapshot (core/checkpoints.py). Returns (manifest, checkpoint or None).

    Raises:
        JournalCorrupt / AuditChainBroken / ExportChainBroken: nothing is exported.
        StoreCorrupt / StoreUnavailable: the snapshot or a file failed.
    """
    with database.reading() as tx:
        head = inventory.chain_heads(tx)["audit_head"]
        sequence = head.get("sequence", 0) if isinstance(head, dict) else 0
        progress(f"snapshot taken at audit sequence {sequence}; verifying it")
        verified = verify_snapshot(tx)
        progress(
            f"snapshot verified at audit sequence {verified.audit_sequence}: "
            f"{verified.entries} entries, {verified.events} journal events"
        )
        if span.previous is not None:
            span.previous.check_extended_by(tx)
        clock = wall_clock_ms() if now_ms is None else now_ms
        return export_signed(tx, out_dir, progress, key, clock, span)


def export_range(since_sequence: int | None, previous: Path | None) -> ExportRange:
    """The rows an export holds: after `previous`'s heads, else after `since_sequence`
    (journal events then all), else everything.

    Raises:
        ConfigurationError: both given, a negative sequence, or no readable manifest in
            `previous`.
    """
    if previous is not None and since_sequence is not None:
        raise ConfigurationError("name a previous export or a sequence, not both")
    if since_sequence is not None and since_sequence < 0:
        raise ConfigurationError("the sequence to export after must be 0 or more")
    if previous is not None:
        return ExportRange.after(PreviousExport.read(previous))
    return ExportRange(since_sequence or 0)


class AuditAccessService:
    """`audit-export` and `audit-verify` over a service's store, as a named operator."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def _authorize_every_scope(self, ctx: CallContext, audit: CallAudit, who: Operator) -> None:
        """`read` in every other scope of the store too (the bound one is decided first).

        Raises:
            ToolError: UNAUTHORIZED in any of them.
        """
        with self.services.database.reading() as tx:
            scopes = inventory.scopes(tx)
        for scope_ref in (s for s in scopes if s != ctx.scope_ref):
            authorize_operator(ctx, audit, who, "read", "audit_access", scope_ref)

    def export(
        self, who: Operator, out: Path, span_of: Callable[[], ExportRange], progress: Progress
    ) -> dict[str, JsonValue]:
        """Verify and export a snapshot to `out`; `{"manifest": ...}` or, when a chain does
        not verify, `{"failure": "..."}` (audited as JOURNAL_CORRUPT; nothing is exported).

        Raises:
            ToolError: UNAUTHORIZED; STORE_UNAVAILABLE when the snapshot or a file failed.
            ConfigurationError: the previous export named has no readable manifest.
        """

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            self._authorize_every_scope(ctx, audit, who)
            span = span_of()
            try:
                manifest, checkpoint = export_from(
                    self.services.database,
                    out,
                    span,
                    progress,
                    self.services.checkpoint_key,
                    self.services.clock_ms(),
                )
            except CHAIN_DEFECTS as exc:
                return self._failed(ctx, audit, exc)
            detail = _export_detail(manifest, span)
            with self.services.database.transaction() as tx:
                if checkpoint is not None:  # kept, like every checkpoint the service signs
                    keep_checkpoint(tx, checkpoint, "export")
                steps.audit_in_transaction(tx, ctx, audit, "ok", detail)
            value: dict[str, JsonValue] = {"manifest": _json(manifest)}
            return ToolOutcome.succeeded(value, audit)

        return run_authorized(self.services, who, "audit_export", "read", act)

    def verify(
        self, who: Operator, progress: Progress, checkpoint: str = "", public_key: str = ""
    ) -> dict[str, JsonValue]:
        """Verify every chain, receipt and row in one snapshot; `{"verified": {...}}` or
        `{"failure": "..."}` with the first defect (audited as JOURNAL_CORRUPT). With a
        `checkpoint` file (absolute path), the same snapshot is compared with it too:
        `{"verified": ..., "checkpoint": {"exit": code, "lines": [...]}}`.

        Raises:
            ToolError: UNAUTHORIZED; STORE_UNAVAILABLE when the snapshot failed.
        """

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            self._authorize_every_scope(ctx, audit, who)
            progress("verifying a snapshot of the store")
            try:
                with self.services.database.reading() as tx:
                    verified = verify_snapshot(tx)
                    compared = (
                        checkpoint_lines_in(tx, Path(checkpoint), public_key or None)
                        if checkpoint
                        else None
                    )
            except CHAIN_DEFECTS as exc:
                return self._failed(ctx, audit, exc)
            value: dict[str, JsonValue] = {"verified": verified.as_json()}
            noted = f"verified up to sequence={verified.audit_sequence}"
            if compared is not None:
                code, lines = compared
                value["checkpoint"] = {"exit": code, "lines": list(lines)}
                noted += f" checkpoint={'extended' if code == 0 else 'not extended'}"
            audit.noted(noted)
            return ToolOutcome.succeeded(value, audit)

        return run_authorized(self.services, who, "audit_verify", "read", act)

    def _failed(self, ctx: CallContext, audit: CallAudit, exc: Exception) -> ToolOutcome:
        # The defect names a sequence or cursor and a scope, never content.
        failure = f"{type(exc).__name__}: {exc}"
        with self.services.database.transaction() as tx:
            steps.audit_in_transaction(tx, ctx, audit, ErrorCode.JOURNAL_CORRUPT.name, failure)
        return ToolOutcome.succeeded({"failure": failure}, audit)


def _export_detail(manifest: dict[str, object], span: ExportRange) -> str:
    """The export's audit detail: which sequences, which previous export, which files."""
    head = manifest.get("audit_head")
    last = head.get("sequence", 0) if isinstance(head, dict) else 0
    files = manifest.get("files")
    rows = {
        str(f["name"]).removesuffix(".parquet"): f["rows"]
        for f in (files if isinstance(files, list) else [])
        if isinstance(f, dict)
    }
    previous = "none" if span.previous is None else span.previous.manifest_sha256
    return (
        f"audit export sequences={sequence_span(span.since_sequence, int(str(last)))} "
        f"rows={','.join(f'{name}:{count}' for name, count in rows.items())} "
        f"previous_manifest_sha256={previous}"
    )


def sequence_span(since: int, last: int) -> str:
    """`first..last` of the entries after `since`, or `none` when there are none."""
    return f"{since + 1}..{last}" if last > since else "none"


def _json(value: object) -> JsonValue:
    """The manifest as JSON values (it is built from JSON values only)."""
    assert isinstance(value, dict)
    return value


def span_from_operands(previous: str, since_sequence: str) -> Callable[[], ExportRange]:
    """The export range the channel operands name (`""` = not given), read when the export
    runs (the previous manifest is read by the process that exports).

    Raises:
        ConfigurationError: (when called) a malformed sequence or unreadable manifest.
    """

    def span() -> ExportRange:
        if previous and not Path(previous).is_absolute():
            raise ConfigurationError("the previous export must be named by an absolute path")
        sequence = None
        if since_sequence:
            if not since_sequence.isdigit():
                raise ConfigurationError("the sequence to export after must be a whole number")
            sequence = int(since_sequence)
        return export_range(sequence, Path(previous) if previous else None)

    return span
