"""Incremental auditor exports: what a previous export held, and proof the store extends it.

An incremental export (`audit export --since PREVIOUS_DIR`) holds only the audit entries after
the previous export's audit head, the receipts of those entries, and each scope's journal
events after that scope's previous head. Its manifest names the previous manifest (its sha256
and heads), so a series of exports is a chain an auditor can check end to end: each file's
sha256 is in its manifest, each manifest's sha256 is in the next one, and the first entry of
an increment links (`previous_hash`) to the previous export's head.

Before anything is written, the export checks in its own snapshot that the store still holds
the previous export's heads unchanged (same entry hash at that sequence, same event hash at
each scope's cursor); a store that was rewritten or truncated since is refused, never
exported as if it continued the series.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.exceptions import ConfigurationError, ExportChainBroken
from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "export.sql")
MANIFEST_FILE = "manifest.json"
# The manifest names at most this many bytes; anything larger is not one of ours.
_MAX_MANIFEST_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class PreviousExport:
    """The heads a previous export pinned, and the sha256 of its manifest file."""

    directory: Path
    manifest_sha256: str
    audit_head: tuple[int, str] | None
    journal_heads: Mapping[str, tuple[int, str]]

    @classmethod
    def read(cls, directory: Path) -> PreviousExport:
        """The previous export in `directory` (its `manifest.json`).

        Raises:
            ConfigurationError: no readable manifest of an audit export there.
        """
        path = directory / MANIFEST_FILE
        try:
            raw = path.read_bytes()[: _MAX_MANIFEST_BYTES + 1]
            if len(raw) > _MAX_MANIFEST_BYTES:
                raise ValueError("too large")
            manifest = json.loads(raw)
            head = manifest["audit_head"]
            audit_head = None if head is None else (int(head["sequence"]), str(head["entry_hash"]))
            journal = {
                str(scope): (int(value["cursor"]), str(value["event_hash"]))
                for scope, value in dict(manifest["journal_heads"]).items()
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigurationError(
                f"--since {directory}: no readable audit export manifest ({path.name}) there"
            ) from exc
        return cls(directory, hashlib.sha256(raw).hexdigest(), audit_head, journal)

    @property
    def sequence(self) -> int:
        return 0 if self.audit_head is None else self.audit_head[0]

    def as_json(self) -> dict[str, JsonValue]:
        """How the next manifest names this one."""
        return {
            "manifest_sha256": self.manifest_sha256,
            "audit_head": None
            if self.audit_head is None
            else {"sequence": self.audit_head[0], "entry_hash": self.audit_head[1]},
        }

    def check_extended_by(self, tx: Transaction) -> None:
        """Check that the store seen by `tx` still holds this export's heads unchanged.

        Raises:
            ExportChainBroken: an entry or event the previous export ended on is gone or
                different (the first divergent sequence or cursor is named).
            StoreUnavailable: a query failed.
        """
        if self.audit_head is not None:
            sequence, entry_hash = self.audit_head
            row = tx.fetchone(_Q["audit_entry_hash"], [sequence])
            if row is None or str(row[0]) != entry_hash:
                raise ExportChainBroken(
                    f"the store does not extend the previous export: audit entry {sequence} "
                    f"is {'missing' if row is None else 'different'}"
                )
        for scope, (cursor, event_hash) in sorted(self.journal_heads.items()):
            row = tx.fetchone(_Q["journal_event_hash"], [scope, cursor])
            if row is None or str(row[0]) != event_hash:
                raise ExportChainBroken(
                    f"the store does not extend the previous export: journal event {cursor} "
                    f"of {scope} is {'missing' if row is None else 'different'}"
                )


@dataclass(frozen=True)
class ExportRange:
    """What an export holds: entries after `since_sequence`, each scope's journal events
    after its cursor in `journal_cursors` (all of a scope not named), and the export it
    continues, if any."""

    since_sequence: int = 0
    journal_cursors: Mapping[str, int] = field(default_factory=dict)
    previous: PreviousExport | None = None

    @classmethod
    def after(cls, previous: PreviousExport) -> ExportRange:
        """The increment that continues `previous`."""
        cursors = {scope: cursor for scope, (cursor, _) in previous.journal_heads.items()}
        return cls(previous.sequence, cursors, previous)

    def journal_parameters(self) -> list[object]:
        scopes = sorted(self.journal_cursors)
        return [scopes, [self.journal_cursors[scope] for scope in scopes]]

    def as_json(self) -> dict[str, JsonValue]:
        """The manifest's account of the range and of the export it continues."""
        return {
            "since_sequence": self.since_sequence,
            "previous": None if self.previous is None else self.previous.as_json(),
        }
