"""A series of exports (a full one, then increments) checks end to end with the files alone,
and any rewritten, removed or reordered piece fails it (`audit verify-export`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pytest

from engram_memory.admin.audit_service import export_from
from engram_memory.cli.main import main
from engram_memory.contract.exceptions import ExportChainBroken
from engram_memory.core.runtime import Services
from engram_memory.store.export_chain import ExportRange, PreviousExport
from engram_memory.store.export_verify import verify_series
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record


def _rewrite(directory: Path, table: str, select: str) -> None:
    """Replace an exported table by `select` over it and fix its sha256 in the manifest, as a
    forger with write access to the export would."""
    path = directory / f"{table}.parquet"
    staged = directory / "staged.parquet"
    query = select.format(f"'{path}'")
    duckdb.sql(f"COPY ({query}) TO '{staged}' (FORMAT parquet)")
    staged.replace(path)
    manifest = json.loads((directory / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["name"] == path.name:
            entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (directory / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def series(alice: Caller, services: Services, tmp_path: Path) -> list[Path]:
    """A full export after one accepted record, an increment after a second one."""
    accepted_record(alice, "First export holds this.")
    first = tmp_path / "first"
    export_from(services.database, first, ExportRange(), lambda _: None)
    accepted_record(alice, "The increment holds this.")
    second = tmp_path / "second"
    span = ExportRange.after(PreviousExport.read(first))
    export_from(services.database, second, span, lambda _: None)
    return [first, second]


def test_a_full_export_and_its_increment_verify_as_one_chain(series: list[Path]) -> None:
    verified = verify_series(series)
    assert verified.exports == 2
    first = json.loads((series[0] / "manifest.json").read_text())
    second = json.loads((series[1] / "manifest.json").read_text())
    assert verified.audit_sequence == second["audit_head"]["sequence"]
    assert verified.entries == second["audit_head"]["sequence"]
    assert second["since_sequence"] == first["audit_head"]["sequence"]
    assert verified.events == 4  # capture + accept, once per export
    assert main(["audit", "verify-export", *map(str, series)]) == 0


def test_an_increment_without_the_exports_before_it_does_not_verify(series: list[Path]) -> None:
    with pytest.raises(ExportChainBroken):
        verify_series(series[1:])
    with pytest.raises(ExportChainBroken):
        verify_series(series[::-1])


@pytest.mark.parametrize(
    ("table", "select"),
    [
        ("audit_entries", "SELECT * REPLACE ('edited' AS detail) FROM {0}"),
        ("audit_entries", "SELECT * FROM {0} WHERE sequence < (SELECT max(sequence) FROM {0})"),
        ("audit_entries", "SELECT * FROM {0} WHERE sequence <> (SELECT min(sequence) FROM {0})"),
        ("decision_receipts", "SELECT * REPLACE ('[]' AS reasons_json) FROM {0}"),
        ("journal_events", "SELECT * FROM {0} WHERE operation <> 'accept'"),
    ],
    ids=["entry-edited", "tail-removed", "first-removed", "receipt-edited", "event-removed"],
)
def test_a_rewritten_increment_fails_even_with_its_manifest_digests_fixed(
    series: list[Path], table: str, select: str
) -> None:
    _rewrite(series[1], table, select)
    with pytest.raises(ExportChainBroken):
        verify_series(series)
    assert main(["audit", "verify-export", *map(str, series)]) == 1


def test_a_previous_manifest_changed_after_the_fact_breaks_the_chain(series: list[Path]) -> None:
    manifest = series[0] / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"format"', '"format" ', 1))
    with pytest.raises(ExportChainBroken):
        verify_series(series)
