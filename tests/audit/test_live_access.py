"""`audit export` / `audit verify` against a RUNNING server (issue 10 item 8).

A real `serve --transport http` process holds a real DuckDB file; the auditor's commands go
through its maintenance channel as a named operator with `read` authority, read one
snapshot, are audited, and export incrementally; agents are served meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from engram_memory.admin.host_setup import SIGNING_KEY_FILE
from engram_memory.client.reference_host import Binding, connect
from engram_memory.contract.types import format_instant
from engram_memory.host.keys import HostSigningKey
from engram_memory.store import audit
from engram_memory.store.database import Database
from tests.admin.test_rotation_cli import prepared as prepared  # 3 accepted records
from tests.cli_runner import run_cli
from tests.servers import http_server

ALICE = Binding("acme", "support", "user:alice", "purpose:support-case")
AUDITOR = ("--tenant", "acme", "--workspace", "support", "--operator", "human:erin")
STRANGER = ("--tenant", "acme", "--workspace", "support", "--operator", "human:zed")
STEWARD = ("--tenant", "acme", "--workspace", "support", "--operator", "human:dana")
SEEDED_ENTRIES = 8_000


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    # In this process (issue 19): the store is held by the `serve` process (or by nobody), so
    # the command takes the same path a process would; the tests check codes and output.
    if argv[:2] in (("audit", "export"), ("audit", "verify")):
        argv = (*argv, "--data-dir", env["ENGRAM_DATA_DIR"])
    return run_cli(env, *argv)


def _export(env: dict[str, str], out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _cli(env, "audit", "export", "--out", str(out), *AUDITOR, *extra)


def _manifest(directory: Path) -> dict[str, object]:
    manifest: dict[str, object] = json.loads((directory / "manifest.json").read_text())
    return manifest


def _rows(directory: Path, table: str, columns: str) -> list[tuple[object, ...]]:
    """`columns` of an exported table; with no table, the audit entries' column types."""
    if not table:
        source = str(directory / "audit_entries.parquet")
        return duckdb.sql(f"DESCRIBE SELECT * FROM '{source}'").fetchall()  # noqa: S608
    source = str(directory / f"{table}.parquet")
    return duckdb.sql(f"SELECT {columns} FROM '{source}'").fetchall()  # noqa: S608 - test paths


def _head(manifest: dict[str, object]) -> dict[str, object]:
    head = manifest["audit_head"]
    assert isinstance(head, dict)
    return head


@pytest.fixture
def serving(prepared: tuple[dict[str, str], list[str]]) -> Iterator[tuple[dict[str, str], str]]:
    """`serve --transport http` on the prepared store; yields (env, MCP URL)."""
    env, _ = prepared
    env = {**env, "ENGRAM_MEMORY_ENABLED": "true", "ENGRAM_POLICY": "embedded"}
    with http_server(env) as (_process, url):
        yield env, url


async def _get(env: dict[str, str], url: str, record_id: str) -> str:
    signer = HostSigningKey.from_pem_file(Path(env["ENGRAM_ROOT_KEY"]).parent / SIGNING_KEY_FILE)
    async with connect(url, signer, ALICE) as host:
        outcome = await host.call(
            "engram_memory_get", {"record_id": record_id, "purpose_ref": ALICE.purpose_ref}
        )
    return "ok" if outcome.envelope["ok"] else str(outcome.envelope["error"]["code"])


def test_export_and_verify_run_inside_a_running_server_for_a_reader_only_and_are_audited(
    serving: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    env, _ = serving
    verified = _cli(env, "audit", "verify", *AUDITOR)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("ok:")

    first = _export(env, tmp_path / "first")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "audit_entries:" in first.stderr  # progress per table, with rows
    manifest = _manifest(tmp_path / "first")
    types = {str(name): str(kind) for name, kind, *_ in _rows(tmp_path / "first", "", "")}
    assert types["recorded_at"] == "TIMESTAMP"
    assert types["first_at"] == "TIMESTAMP"
    assert types["sequence"] == "UBIGINT"
    (count,) = _rows(tmp_path / "first", "audit_entries", "count(*)")[0]
    assert count == _head(manifest)["sequence"]
    # The snapshot's verification before it is in the trail (the export's own entry follows it).
    assert ("admin:audit_verify", "ok") in _rows(
        tmp_path / "first", "audit_entries", "tool, outcome"
    )

    # An operator without read authority is refused with its code; nothing is exported.
    refused = _cli(env, "audit", "export", "--out", str(tmp_path / "out"), *STRANGER)
    assert refused.returncode == 5
    assert json.loads(refused.stdout) == {"ok": False, "code": "UNAUTHORIZED"}
    assert not (tmp_path / "out" / "manifest.json").exists()
    denied = _cli(env, "audit", "verify", *STRANGER)
    assert denied.returncode == 5
    assert json.loads(denied.stdout) == {"ok": False, "code": "UNAUTHORIZED"}

    # The export itself is in the trail: the next increment holds its entry, with the range.
    second = _export(env, tmp_path / "second", "--since", str(tmp_path / "first"))
    assert second.returncode == 0, second.stdout + second.stderr
    exports = _rows(tmp_path / "second", "audit_entries", "tool, outcome, detail")
    outcomes = [(tool, outcome) for tool, outcome, _ in exports]
    assert ("admin:audit_export", "ok") in outcomes
    assert ("admin:audit_export", "UNAUTHORIZED") in outcomes  # refusals are audited too
    assert ("admin:audit_verify", "UNAUTHORIZED") in outcomes
    detail = next(str(d) for t, o, d in exports if (t, o) == ("admin:audit_export", "ok"))
    assert f"sequences=1..{_head(manifest)['sequence']}" in detail

    # Without an operator, the store a server holds is not opened: one line, exit 2.
    unnamed = _cli(env, "audit", "export", "--out", str(tmp_path / "unnamed"))
    assert unnamed.returncode == 2
    assert len(unnamed.stderr.strip().splitlines()) == 1


async def test_an_incremental_export_holds_only_new_entries_and_chains_to_the_previous(
    prepared: tuple[dict[str, str], list[str]],
    serving: tuple[dict[str, str], str],
    tmp_path: Path,
) -> None:
    _, records = prepared
    env, url = serving
    assert _export(env, tmp_path / "a").returncode == 0
    previous = _manifest(tmp_path / "a")
    assert await _get(env, url, records[0]) == "ok"
    disputed = _cli(env, "admin", *STEWARD, "dispute", records[1], "--reason", "reason:x")
    assert disputed.returncode == 0, disputed.stderr

    increment = _export(env, tmp_path / "b", "--since", str(tmp_path / "a"), "--json")
    assert increment.returncode == 0, increment.stderr
    manifest = json.loads(increment.stdout)
    assert manifest == _manifest(tmp_path / "b")
    head = _head(previous)
    assert manifest["previous"] == {
        "manifest_sha256": hashlib.sha256(
            (tmp_path / "a" / "manifest.json").read_bytes()
        ).hexdigest(),
        "audit_head": head,
    }
    entries = _rows(tmp_path / "b", "audit_entries", "sequence, previous_hash, tool")
    sequences = [int(str(sequence)) for sequence, _, _ in entries]
    assert sequences == list(range(int(str(head["sequence"])) + 1, sequences[-1] + 1))
    assert entries[0][1] == head["entry_hash"]  # the increment links to the previous head
    assert "engram_memory_get" in [tool for _, _, tool in entries]
    # Only the dispute's journal event is new; receipts only of the new entries.
    events = _rows(tmp_path / "b", "journal_events", "operation, target_id")
    assert events == [("dispute", records[1])]
    audit_ids = {row[0] for row in _rows(tmp_path / "b", "audit_entries", "audit_id")}
    receipts = _rows(tmp_path / "b", "decision_receipts", "audit_id")
    assert receipts
    assert {row[0] for row in receipts} <= audit_ids

    # A previous export the store does not extend (its head rewritten) is refused.
    forged = tmp_path / "forged"
    forged.mkdir()
    tampered = {**previous, "audit_head": {**head, "entry_hash": "sha256:" + "0" * 64}}
    (forged / "manifest.json").write_text(json.dumps(tampered))
    refused = _export(env, tmp_path / "c", "--since", str(forged))
    assert refused.returncode == 1
    assert refused.stdout.startswith("FAILED:")
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_with_no_server_a_named_auditor_opens_the_service_and_is_audited_an_unnamed_reads_only(
    prepared: tuple[dict[str, str], list[str]], tmp_path: Path
) -> None:
    env, _ = prepared
    named = _export(env, tmp_path / "named")
    assert named.returncode == 0, named.stdout + named.stderr
    unnamed = _cli(env, "audit", "export", "--out", str(tmp_path / "unnamed"), "--json")
    assert unnamed.returncode == 0, unnamed.stderr
    manifest = json.loads(unnamed.stdout)
    # The read-only export holds the named one's audit entry and wrote none of its own.
    assert _head(manifest)["sequence"] == _head(_manifest(tmp_path / "named"))["sequence"] + 1
    tools = [tool for (tool,) in _rows(tmp_path / "unnamed", "audit_entries", "tool")]
    assert tools[-1] == "admin:audit_export"
    assert tools.count("admin:audit_export") == 1
    series = _cli(env, "audit", "verify-export", str(tmp_path / "unnamed"))
    assert series.returncode == 0, series.stdout


def _seed_entries(data_dir: Path, count: int) -> None:
    """`count` more valid audit entries in the stopped store (a large trail to export)."""
    database = Database.open(data_dir)
    try:
        with database.transaction() as tx:
            audit.append_all(
                tx,
                [
                    audit.AuditRecord(
                        recorded_at=format_instant(1_767_225_600_000 + i),
                        audit_id=f"seed:{i}",
                        scope_ref="tenant:acme/workspace:support",
                        principal_ref="p",
                        agent_ref="a",
                        session_ref="s",
                        tool="engram_memory_get",
                        outcome="NOT_FOUND",
                        bundle_digest="",
                        bundle_revision="",
                    )
                    for i in range(count)
                ],
            )
    finally:
        database.close()


async def test_agents_are_served_while_a_large_export_runs_and_it_holds_one_snapshot(
    prepared: tuple[dict[str, str], list[str]], tmp_path: Path
) -> None:
    env, records = prepared
    _seed_entries(Path(env["ENGRAM_DATA_DIR"]), SEEDED_ENTRIES)
    env = {**env, "ENGRAM_MEMORY_ENABLED": "true", "ENGRAM_POLICY": "embedded"}
    with http_server(env) as (_process, url):
        # A process of its own: the export must run WHILE this test's agent calls are served.
        command = [sys.executable, "-m", "engram_memory.cli", "audit", "export"]
        data_dir = env["ENGRAM_DATA_DIR"]
        export = subprocess.Popen(
            [*command, "--out", str(tmp_path / "big"), "--data-dir", data_dir, *AUDITOR],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert export.stderr is not None
            snapshot_line = ""
            for line in export.stderr:  # ends when the export ends, whatever happens
                if line.startswith("snapshot taken at audit sequence"):
                    snapshot_line = line
                    break
            assert snapshot_line, "the export never took its snapshot"
            # The export now reads its snapshot; agents' calls are served meanwhile.
            codes = [await _get(env, url, records[i % 3]) for i in range(6)]
            stdout, _ = export.communicate(timeout=120)
        finally:
            if export.poll() is None:
                export.kill()
                export.wait()
    assert codes == ["ok"] * 6
    assert export.returncode == 0, stdout
    snapshot = int(snapshot_line.split("sequence")[1].split(";")[0])
    manifest = _manifest(tmp_path / "big")
    assert _head(manifest)["sequence"] == snapshot  # none of the calls made meanwhile
    assert snapshot > SEEDED_ENTRIES
    (count,) = _rows(tmp_path / "big", "audit_entries", "count(*)")[0]
    assert count == snapshot


def test_an_unnamed_export_of_a_store_a_server_holds_names_the_flags_that_reach_it(
    serving: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    """Issue 24, finding 7: not "cannot be opened", but how to export through the server."""
    env, _ = serving
    refused = _cli(env, "audit", "export", "--out", str(tmp_path / "unnamed"))
    assert refused.returncode == 2
    named = set(re.findall(r"--[a-z]+", refused.stderr))
    assert {"--tenant", "--workspace", "--operator"} <= named
    assert not (tmp_path / "unnamed" / "manifest.json").exists()
