"""Issue 9 item 7, checked as someone holding the store files would: capture, admit and
forget through the real server (stdio and streamable HTTP), withdraw another candidate, stop
the server, then search every column of every table (read-only), every file of the data
directory (store, WAL, key directory, anchor) and an auditor export for the plain
`payload_digest`, guard digest and `record_digest` of the forgotten content.

The guard digest is found nowhere. What remains is exactly what docs/auditors/guide.md ("Forgotten
content") documents: the journal's capture, accept and tombstone events (their hash chain
commits to those digests) and the capture's idempotency result (its replay answers the
original `record_digest`; the record id is that digest in base32 anyway). The assertions name
each remaining place, so one more place fails the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import ReferenceHost
from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import guard_digest
from engram_memory.core.forgotten import KEYED_PREFIX
from engram_memory.core.records import effective_payload
from engram_memory.store.connection import DATABASE_FILE
from tests.adversarial.evidence_support import (
    SCOPE,
    Server,
    code,
    forget_args,
    key,
    real_server,
    value,
)
from tests.cli_runner import run_cli

CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"


def _hex(digest: str) -> str:
    """The 64 hex digits: found whatever prefix or encoding of the text surrounds them."""
    return digest.split(":", 1)[1]


async def _admit(host: ReferenceHost, candidate_id: str) -> dict[str, Any]:
    args = {"candidate_id": candidate_id, "idempotency_key": key("adm")}
    outcome: dict[str, Any] = value(await host.call(ADMIT, args))["outcome"]
    return outcome


async def _confirmed(host: ReferenceHost, tool: str, args: dict[str, Any], target: str) -> None:
    token = host.confirmation_for(tool, args, target, "human:dana")
    value(await host.call(tool, args, confirmation=token))


def _cells_of(con: duckdb.DuckDBPyConnection, source: str, label: str) -> list[tuple[str, bytes]]:
    """Every cell of `source` as bytes (text as UTF-8, BLOBs as they are), by `label.column`."""
    result = con.execute(f"SELECT * FROM {source}")  # noqa: S608 - catalog names, test paths
    columns = [f"{label}.{d[0]}" for d in result.description or ()]
    return [
        (name, cell if isinstance(cell, bytes) else str(cell).encode("utf-8"))
        for row in result.fetchall()
        for name, cell in zip(columns, row, strict=True)
    ]


def _store_cells(server: Server) -> list[tuple[str, bytes]]:
    """Every cell of every table of the store, opened read-only: one pass."""
    with duckdb.connect(str(server.data_dir / DATABASE_FILE), read_only=True) as con:
        tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT internal")
        return [
            cell for (table,) in tables.fetchall() for cell in _cells_of(con, f'"{table}"', table)
        ]


def _export_cells(export: Path) -> list[tuple[str, bytes]]:
    """Every cell of every Parquet file of an auditor export (compressed: not grep-able)."""
    with duckdb.connect() as con:
        return [
            cell
            for path in sorted(export.glob("*.parquet"))
            for cell in _cells_of(con, "'" + str(path).replace("'", "''") + "'", path.name)
        ]


def _columns_holding(cells: list[tuple[str, bytes]], needle: str) -> set[str]:
    raw = needle.encode("ascii")
    return {name for name, cell in cells if raw in cell.lower()}


def _files_holding(root: Path, needle: str) -> set[str]:
    raw = needle.encode("ascii")
    return {
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and raw in path.read_bytes()
    }


def _beside_the_store(
    found: tuple[set[str], set[str], set[str]],
) -> tuple[set[str], set[str], set[str]]:
    """`found` without a raw hit in the store file itself: it compresses some columns, so a
    digest its columns hold may or may not show in its bytes (the columns were searched)."""
    columns, files, exported = found
    return columns, files - {DATABASE_FILE}, exported


def _export(server: Server, out: Path) -> None:
    """`audit export` of the stopped store, through `main(argv)` in this process
    (tests/cli_runner.py): what it writes is searched, its exit code checked."""
    done = run_cli(
        server.env, "audit", "export", "--data-dir", str(server.data_dir), "--out", str(out)
    )
    assert done.returncode == 0, done.stderr


def _capture_digests(server: Server, candidate_id: str) -> dict[str, str]:
    """The digests the journal's capture event holds (what an attacker reads first)."""
    (row,) = server.rows(
        "SELECT event_json FROM journal_events WHERE event_id = ?", [f"capture:{candidate_id}"]
    )
    digests: dict[str, str] = json.loads(row[0])["digests"]
    return digests


async def _withdraw(host: ReferenceHost, candidate_id: str) -> None:
    args = {"candidate_id": candidate_id, "idempotency_key": key("wdr"), "reason_ref": "reason:r"}
    await _confirmed(host, "engram_memory_withdraw", args, candidate_id)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_store_keeps_no_plain_digest_of_forgotten_content_beyond_the_documented(
    transport: str, tmp_path: Path
) -> None:
    args = demo_capture_arguments("Courier lost parcel 7781; refund approved.", key("cap"))
    draft = demo_capture_arguments("Draft note the agent took back.", key("cap"))
    with real_server(transport, tmp_path) as server:
        async with server.host() as host:
            captured = value(await host.call(CAPTURE, args))
            record_id = (await _admit(host, captured["candidate_id"]))["record_id"]
            read = {"record_id": record_id, "purpose_ref": host.binding.purpose_ref}
            live = value(await host.call("engram_memory_get", read))["record"]
            await _confirmed(host, "engram_memory_forget", forget_args(record_id), record_id)
            withdrawn = value(await host.call(CAPTURE, draft))["candidate_id"]
            await _withdraw(host, withdrawn)
            # The guard still holds forgotten content (the re-capture is then withdrawn too);
            # unrelated content is still accepted and the forgotten record stays gone.
            again = value(await host.call(CAPTURE, {**args, "idempotency_key": key("cap")}))
            assert (await _admit(host, again["candidate_id"]))["status"] == "pending_adjudication"
            await _withdraw(host, again["candidate_id"])
            other = value(await host.call(CAPTURE, demo_capture_arguments("Unrelated.", key("c"))))
            assert (await _admit(host, other["candidate_id"]))["status"] == "accepted"
            assert code(await host.call("engram_memory_get", read)) == "NOT_FOUND"
        server.stop()

    assert _capture_digests(server, captured["candidate_id"]) == {
        "payload_digest": live["payload_digest"],
        "record_digest": captured["record_digest"],
    }
    guard = guard_digest(effective_payload(normalize(args["payload"]), SCOPE, None))
    draft_digests = _capture_digests(server, withdrawn)
    draft_guard = guard_digest(effective_payload(normalize(draft["payload"]), SCOPE, None))
    export = tmp_path / "export"
    _export(server, export)

    cells, exported = _store_cells(server), _export_cells(export)
    manifest = (export / "manifest.json").read_bytes()

    def places(digest: str) -> tuple[set[str], set[str], set[str]]:
        """Where a digest is: store columns, files of the data directory (raw bytes: store,
        WAL, key directory, anchor) and export columns (plus its manifest)."""
        needle = _hex(digest)
        files = _files_holding(server.data_dir, needle)
        in_export = _columns_holding(exported, needle)
        if needle.encode("ascii") in manifest:
            in_export.add("manifest.json")
        return _columns_holding(cells, needle), files, in_export

    nowhere: tuple[set[str], set[str], set[str]] = (set(), set(), set())
    assert places(guard) == nowhere
    assert places(draft_guard) == nowhere
    # Documented (docs/auditors/guide.md "Forgotten content"): the journal's hash chain commits to
    # the capture event's payload digest and to the record digest of every event.
    in_journal = (
        {"journal_events.event_json"},
        set(),
        {"journal_events.parquet.event_json"},
    )
    assert _beside_the_store(places(live["payload_digest"])) == in_journal
    assert _beside_the_store(places(draft_digests["payload_digest"])) == in_journal
    # ... and the capture's idempotency result keeps the record digest its replay answers.
    with_result = ({"journal_events.event_json", "idempotency.result_json"}, *in_journal[1:])
    assert _beside_the_store(places(captured["record_digest"])) == with_result
    assert _beside_the_store(places(draft_digests["record_digest"])) == with_result
    (keyed,) = server.rows(
        "SELECT payload_digest, guard_digest, record_digest FROM records WHERE record_id = ?",
        [record_id],
    )
    assert all(str(form).startswith(KEYED_PREFIX) for form in keyed)
