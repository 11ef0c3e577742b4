"""Auditor export: Parquet files of the audit trail, receipts and journal, plus a manifest.

Auditors never open the live DuckDB file (one writer per file); they query an export. The
manifest pins the chain heads at export time and the sha256 of every file, so an export can be
checked for completeness and tampering without the service. Columns keep their names and
types, except the Instants the store keeps as text, exported as TIMESTAMP (UTC; SQL in
store/sql/export.sql). An incremental export holds only what follows a previous one
(store/export_chain.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from engram_memory._internal.private_files import FILE_MODE, make_private, make_private_directory
from engram_memory.contract.canonical import JsonValue, canonical_text
from engram_memory.store.connection import load_queries
from engram_memory.store.export_chain import MANIFEST_FILE as MANIFEST_FILE
from engram_memory.store.export_chain import ExportRange
from engram_memory.store.transaction import Transaction

_Q = load_queries("engram_memory.store.sql", "export.sql")

EXPORTED_TABLES = ("audit_entries", "decision_receipts", "journal_events")


def _sql_path(path: Path) -> str:
    # COPY takes a literal file name; quote it safely rather than bind it.
    return "'" + str(path).replace("'", "''") + "'"


def _parameters(table: str, span: ExportRange) -> list[object]:
    if table == "journal_events":
        return span.journal_parameters()
    return [span.since_sequence]


def export_tables(
    tx: Transaction,
    out_dir: Path,
    progress: Callable[[str], None],
    span: ExportRange | None = None,
    *,
    extra_files: Mapping[str, Mapping[str, JsonValue]] | None = None,
    seal: Callable[[dict[str, object]], dict[str, object]] | None = None,
) -> dict[str, object]:
    """Write one Parquet file per exported table (the rows `span` selects: everything by
    default) and the manifest; return the manifest. Every read is in `tx`, so files and
    heads describe one instant.

    `extra_files` (name -> JSON document, e.g. the export's signed checkpoint) are written
    beside the tables and listed in the manifest; `seal` (core/checkpoints.py `sign_manifest`)
    timestamps and signs the manifest before it is written.

    Raises:
        StoreUnavailable: a query or COPY failed.
    """
    span = span or ExportRange()
    make_private_directory(out_dir)
    files = []
    for index, table in enumerate(EXPORTED_TABLES, start=1):
        target = out_dir / f"{table}.parquet"
        progress(f"[{index}/{len(EXPORTED_TABLES)}] exporting {table}")
        copied = tx.fetchone(
            f"COPY ({_Q['export_' + table]}) TO {_sql_path(target)} (FORMAT parquet)",
            _parameters(table, span),
        )
        make_private(target)  # DuckDB created it under the process umask
        rows = int(copied[0]) if copied else 0
        progress(f"[{index}/{len(EXPORTED_TABLES)}] {table}: {rows} rows")
        files.append(
            {
                "name": target.name,
                "rows": rows,
                "sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
            }
        )
    for name, document in sorted((extra_files or {}).items()):
        target = out_dir / name
        _write_private(target, json.dumps(dict(document), indent=2, sort_keys=True) + "\n")
        files.append(
            {"name": name, "rows": 1, "sha256": hashlib.sha256(target.read_bytes()).hexdigest()}
        )
    head = tx.fetchone(_Q["audit_head"])
    journal_heads = {
        str(scope): {"cursor": str(cursor), "event_hash": str(event_hash)}
        for scope, cursor, event_hash in tx.fetchall(_Q["journal_heads"])
    }
    manifest: dict[str, object] = {
        "format": "engram-audit-export/1",
        "audit_head": None
        if head is None
        else {"sequence": int(head[0]), "entry_hash": str(head[1])},
        "journal_heads": journal_heads,
        "files": files,
        **span.as_json(),
    }
    if seal is not None:
        manifest = seal(manifest)
    text = json.dumps(json.loads(canonical_text(manifest)), indent=2) + "\n"
    _write_private(out_dir / MANIFEST_FILE, text)
    progress(f"manifest written: {out_dir / MANIFEST_FILE}")
    return manifest


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    make_private(path)  # an existing file keeps its mode on O_TRUNC
