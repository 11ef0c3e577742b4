"""Check a series of auditor exports end to end, with the files alone (no store, no service).

`engram-memory audit verify-export DIR [DIR ...]` takes a full export and the increments that
follow it, oldest first, and checks, for each: every file's sha256 against its manifest; that
its manifest names the previous one (`previous.manifest_sha256`, `since_sequence`); every
audit entry re-derives its `entry_hash`, sequences are dense from `since_sequence + 1`, and
the first `previous_hash` is the previous export's head (the zero digest for a full one);
every receipt re-derives and every entry's receipts are there; every journal event
re-derives and links to its scope's previous head; and the last entry and events are the
heads the manifest pins. The first defect is named by export, sequence or cursor.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import ZERO_DIGEST, digest
from engram_memory.contract.exceptions import ExportChainBroken
from engram_memory.contract.receipts import receipt_digest_of
from engram_memory.store.audit import entry_hash_of_columns
from engram_memory.store.export_chain import MANIFEST_FILE, PreviousExport

# Instants are exported as TIMESTAMP; hashes are over the contract's text form.
_INSTANT = "strftime({0}, '%Y-%m-%dT%H:%M:%S.%gZ')"


@dataclass(frozen=True)
class SeriesVerified:
    exports: int
    entries: int
    receipts: int
    events: int
    audit_sequence: int


def _rows(directory: Path, table: str, order: str) -> list[dict[str, Any]]:
    source = str(directory / f"{table}.parquet").replace("'", "''")
    select = "*"
    if table == "audit_entries":
        select = "* REPLACE ({}, {}, {})".format(
            _INSTANT.format("recorded_at") + " AS recorded_at",
            "coalesce(" + _INSTANT.format("first_at") + ", '') AS first_at",
            "coalesce(" + _INSTANT.format("last_at") + ", '') AS last_at",
        )
    try:
        with duckdb.connect() as connection:
            result = connection.execute(f"SELECT {select} FROM '{source}' ORDER BY {order}")  # noqa: S608
            names = [str(column[0]) for column in result.description or []]
            return [dict(zip(names, row, strict=True)) for row in result.fetchall()]
    except duckdb.Error as exc:
        raise ExportChainBroken(f"{directory}: {table}.parquet is not readable") from exc


def _check_files(directory: Path, manifest: dict[str, Any]) -> None:
    for entry in manifest.get("files", []):
        path = directory / str(entry["name"])
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            raise ExportChainBroken(f"{directory}: {entry['name']} is not the file named")


def _check_entries(
    directory: Path, since: int, previous_hash: str, receipts: set[str]
) -> tuple[int, str]:
    """Returns (last sequence, its entry hash)."""
    expected = since + 1
    for row in _rows(directory, "audit_entries", "sequence"):
        sequence = int(row["sequence"])
        if sequence != expected or row["previous_hash"] != previous_hash:
            raise ExportChainBroken(f"{directory}: gap or broken link at audit entry {expected}")
        if entry_hash_of_columns(row) != row["entry_hash"]:
            raise ExportChainBroken(f"{directory}: audit entry {sequence} does not re-derive")
        if any(d not in receipts for d in json.loads(row["receipt_digests_json"])):
            raise ExportChainBroken(f"{directory}: audit entry {sequence} names a missing receipt")
        previous_hash, expected = str(row["entry_hash"]), expected + 1
    return expected - 1, previous_hash


def _check_receipts(directory: Path) -> set[str]:
    known: set[str] = set()
    for row in _rows(directory, "decision_receipts", "decided_at_ms, decision_id"):
        body: dict[str, JsonValue] = {
            key: row[key]
            for key in (
                "decision_id",
                "policy_path",
                "input_digest",
                "result_digest",
                "bundle_revision",
                "bundle_digest",
                "engine_id",
                "engine_version",
            )
        }
        body["reasons"] = json.loads(row["reasons_json"])
        body["decided_at_ms"] = int(row["decided_at_ms"])
        if receipt_digest_of(body) != row["receipt_digest"]:
            raise ExportChainBroken(f"{directory}: receipt {row['decision_id']} does not re-derive")
        known.add(str(row["receipt_digest"]))
    return known


def _check_events(directory: Path, heads: dict[str, tuple[int, str]]) -> int:
    """Advance `heads` (scope -> (cursor, event hash)) over this export's events."""
    count = 0
    for row in _rows(directory, "journal_events", "scope_ref, cursor"):
        scope, cursor = str(row["scope_ref"]), int(row["cursor"])
        last, previous = heads.get(scope, (0, ZERO_DIGEST))
        body = json.loads(row["event_json"])
        if (
            cursor != last + 1
            or row["previous_event_hash"] != previous
            or body.get("previous_event_hash") != previous
            or body.get("cursor") != str(cursor)
            or digest("memory-journal-event", body, field="event_hash") != row["event_hash"]
        ):
            raise ExportChainBroken(f"{directory}: broken journal chain at {scope} cursor {cursor}")
        heads[scope] = (cursor, str(row["event_hash"]))
        count += 1
    return count


def verify_series(directories: Sequence[Path]) -> SeriesVerified:
    """Check `directories` (a full export, then its increments, oldest first).

    Raises:
        ExportChainBroken: the first defect.
        ConfigurationError: a directory holds no readable manifest.
    """
    previous: PreviousExport | None = None
    heads: dict[str, tuple[int, str]] = {}
    entries = receipts = events = 0
    sequence = 0
    for directory in directories:
        current = PreviousExport.read(directory)
        manifest: dict[str, Any] = json.loads((directory / MANIFEST_FILE).read_bytes())
        _check_files(directory, manifest)
        since = int(manifest.get("since_sequence", 0))
        named = manifest.get("previous")
        if previous is None and since:
            raise ExportChainBroken(f"{directory}: an increment; name the exports before it")
        if previous is not None and (
            not isinstance(named, dict)
            or named.get("manifest_sha256") != previous.manifest_sha256
            or since != previous.sequence
        ):
            raise ExportChainBroken(f"{directory}: does not continue {previous.directory}")
        start_hash = (
            ZERO_DIGEST
            if previous is None or previous.audit_head is None
            else (previous.audit_head[1])
        )
        known = _check_receipts(directory)
        last, last_hash = _check_entries(directory, since, start_hash, known)
        if current.audit_head is not None and (last, last_hash) != current.audit_head:
            raise ExportChainBroken(f"{directory}: the entries do not end at the manifest's head")
        events += _check_events(directory, heads)
        if any(heads.get(scope) != head for scope, head in current.journal_heads.items()):
            raise ExportChainBroken(f"{directory}: the journal does not end at its heads")
        entries += last - since
        receipts += len(known)
        sequence, previous = last, current
    return SeriesVerified(len(directories), entries, receipts, events, sequence)
