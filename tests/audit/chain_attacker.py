"""What someone who can write a stopped store (but holds no key) would do to hide a change:
edit a row, recompute every hash after it, drop the tail, and remove the head anchor and its
marker row so that nothing in the data directory remembers the old heads.

It works on the DuckDB file directly, as such an attacker would, with the hashing rules any
reader of the source knows.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from engram_memory.contract.canonical import JsonValue, canonical_text
from engram_memory.contract.digests import ZERO_DIGEST, digest
from engram_memory.store.anchors import ANCHOR_STEM
from engram_memory.store.audit import (
    _APPROVAL_COLUMNS,
    _COLUMNS,
    _STREAM_COLUMNS,
    _STREAM_DEFAULTS,
)
from engram_memory.store.connection import DATABASE_FILE

_SELECT = ", ".join(
    [
        *(c if c not in ("target_ids", "receipt_digests") else f"{c}_json" for c in _COLUMNS),
        *_STREAM_COLUMNS,
        *_APPROVAL_COLUMNS,
    ]
)


def _connect(data_dir: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(data_dir / DATABASE_FILE))


def _entry(row: tuple[object, ...]) -> dict[str, JsonValue]:
    """The hashed form of an audit entry row (as store/audit.py builds it)."""
    base = len(_COLUMNS)
    entry: dict[str, JsonValue] = dict(zip(_COLUMNS, row[:base], strict=True))  # type: ignore[arg-type]
    entry["sequence"] = int(str(row[0]))
    entry["target_ids"] = json.loads(str(row[9]))
    entry["receipt_digests"] = json.loads(str(row[10]))
    stream = row[base : base + len(_STREAM_COLUMNS)]
    for column, value in zip(_STREAM_COLUMNS, stream, strict=True):
        if value != _STREAM_DEFAULTS[column]:
            entry[column] = int(str(value)) if column == "occurrences" else value  # type: ignore[assignment]
    approvals = row[base + len(_STREAM_COLUMNS) :]
    for column, value in zip(_APPROVAL_COLUMNS, approvals, strict=True):
        if value is not None:
            entry[column] = value  # type: ignore[assignment]
    return entry


def _recompute_audit(con: duckdb.DuckDBPyConnection) -> None:
    previous = ZERO_DIGEST
    rows = con.execute(f"SELECT {_SELECT} FROM audit_entries ORDER BY sequence").fetchall()  # noqa: S608
    for row in rows:
        entry = _entry(row)
        entry["previous_hash"] = previous
        previous = digest("audit-entry", entry, field="entry_hash")
        con.execute(
            "UPDATE audit_entries SET previous_hash = ?, entry_hash = ? WHERE sequence = ?",
            [entry["previous_hash"], previous, entry["sequence"]],
        )


def _recompute_journal(con: duckdb.DuckDBPyConnection, scope_ref: str) -> None:
    previous = ZERO_DIGEST
    rows = con.execute(
        "SELECT cursor, event_json FROM journal_events WHERE scope_ref = ? ORDER BY cursor",
        [scope_ref],
    ).fetchall()
    for cursor, event_json in rows:
        body = json.loads(event_json)
        body["previous_event_hash"] = previous
        previous = digest("memory-journal-event", body, field="event_hash")
        con.execute(
            "UPDATE journal_events SET event_json = ?, previous_event_hash = ?, event_hash = ? "
            "WHERE scope_ref = ? AND cursor = ?",
            [canonical_text(body), body["previous_event_hash"], previous, scope_ref, cursor],
        )


def _cover_tracks(data_dir: Path, con: duckdb.DuckDBPyConnection) -> None:
    con.execute("DELETE FROM head_anchor_marker")
    for slot in ("a", "b"):
        (data_dir / f"{ANCHOR_STEM}.{slot}.json").unlink(missing_ok=True)


def rewrite_audit_entry(data_dir: Path, sequence: int, detail: str) -> None:
    """Change one entry's `detail` and recompute the whole audit chain."""
    with _connect(data_dir) as con:
        con.execute("UPDATE audit_entries SET detail = ? WHERE sequence = ?", [detail, sequence])
        _recompute_audit(con)
        _cover_tracks(data_dir, con)


def rewrite_journal_event(data_dir: Path, scope_ref: str, cursor: int) -> None:
    """Add a field to one journal event and recompute that scope's chain."""
    with _connect(data_dir) as con:
        row = con.execute(
            "SELECT event_json FROM journal_events WHERE scope_ref = ? AND cursor = ?",
            [scope_ref, cursor],
        ).fetchone()
        assert row is not None
        body = {**json.loads(row[0]), "forged": True}
        con.execute(
            "UPDATE journal_events SET event_json = ? WHERE scope_ref = ? AND cursor = ?",
            [canonical_text(body), scope_ref, cursor],
        )
        _recompute_journal(con, scope_ref)
        _cover_tracks(data_dir, con)


def drop_tail(data_dir: Path, *, keep_entries: int, scope_ref: str, keep_events: int) -> None:
    """Delete every audit entry after `keep_entries` and the scope's events after
    `keep_events` (nothing to recompute: the chains that remain are intact)."""
    with _connect(data_dir) as con:
        con.execute("DELETE FROM audit_entries WHERE sequence > ?", [keep_entries])
        con.execute(
            "DELETE FROM journal_events WHERE scope_ref = ? AND cursor > ?",
            [scope_ref, keep_events],
        )
        _cover_tracks(data_dir, con)


def delete_stored_checkpoints(data_dir: Path) -> None:
    with _connect(data_dir) as con:
        con.execute("DELETE FROM audit_checkpoints")
