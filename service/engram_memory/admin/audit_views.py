"""An audit export opened for SQL: one view per exported table, over its Parquet file.

Before anything is read, every exported file is checked against the sha256 its
`manifest.json` pinned, so a query never answers from a file edited after the export. The
connection is an in-memory DuckDB: nothing the auditor runs can touch the service's store.
A data directory is queried through a fresh export into a private temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from engram_memory.contract.exceptions import ExportTampered, ExportUnusable

if TYPE_CHECKING:
    from engram_memory.admin.maintenance import Operator

EXPORTED_TABLES = ("audit_entries", "decision_receipts", "journal_events")
MANIFEST_FILE = "manifest.json"


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_export(export_dir: Path) -> None:
    """Check that `export_dir` holds every exported table, each as its manifest pinned it.

    Raises:
        ExportUnusable: no readable manifest, or a table's file or manifest entry missing.
        ExportTampered: a file's sha256 differs from its manifest's.
    """
    try:
        manifest = json.loads((export_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ExportUnusable(
            f"{export_dir} is not an audit export (no readable manifest.json)"
        ) from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    pinned = {
        str(f.get("name")): str(f.get("sha256"))
        for f in (files if isinstance(files, list) else [])
        if isinstance(f, dict)
    }
    for table in EXPORTED_TABLES:
        name = f"{table}.parquet"
        if name not in pinned or not (export_dir / name).is_file():
            raise ExportUnusable(f"{export_dir} is not a complete audit export ({name} missing)")
        if _file_sha256(export_dir / name) != pinned[name]:
            raise ExportTampered(f"{name} does not match the sha256 in its manifest")


def _literal(path: Path) -> str:
    # A view's FROM takes a literal file name: quote it rather than bind it.
    return "'" + str(path).replace("'", "''") + "'"


def open_export(export_dir: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with a view per exported table of the checked `export_dir`.

    Raises:
        ExportUnusable / ExportTampered: see `check_export`.
    """
    check_export(export_dir)
    con = duckdb.connect()
    # Timestamps are UTC; a session time zone must not shift what an auditor sees.
    con.execute("SET TimeZone = 'UTC'")
    for table in EXPORTED_TABLES:
        source = _literal((export_dir / f"{table}.parquet").absolute())
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({source})")  # noqa: S608 - constant names, quoted path
    return con


@contextmanager
def opened_source(
    export_dir: Path | None, data_dir: Path | None, who: Operator | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """The views of an export, or of a fresh export of `data_dir` made into a private
    temporary directory that is removed afterwards (progress on stderr): through the
    server holding it, as `who`, when one does (admin/audit_access.py).

    Raises:
        ExportUnusable / ExportTampered: the export cannot be used.
        AuditAccessFailed / StoreOpenFailed / ToolError / ConfigurationError: the data
            directory's snapshot failed or was refused; nothing is queried.
    """
    if export_dir is not None:
        con = open_export(export_dir)
        try:
            yield con
        finally:
            con.close()
        return
    assert data_dir is not None
    with tempfile.TemporaryDirectory(prefix="engram-audit-") as scratch:
        snapshot = Path(scratch) / "export"
        # Imported here: the store, channel and crypto stack is needed only to export.
        from engram_memory.admin.audit_access import export_snapshot

        export_snapshot(
            data_dir,
            snapshot,
            since_sequence=None,
            progress=lambda line: print(line, file=sys.stderr),
            who=who,
        )
        con = open_export(snapshot)
        try:
            yield con
        finally:
            con.close()
