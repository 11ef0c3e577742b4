"""`engram-memory audit query NAME` and `audit sql` on a real export of a real server's store.

One scenario per module: a real `serve --transport http` process, driven by the reference host
over MCP and by `engram-memory admin` over the maintenance channel, first under the shipped
bundle, then (restarted) under a second bundle revision; stopped; exported with `audit
export`. Every named query is asserted on the rows that scenario must produce, then the CLI's
errors and formats.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import duckdb
import httpx
import pytest
from mcp import MCPError

from engram_memory.admin.audit_queries import load_named_queries
from engram_memory.admin.host_setup import init_host_dir
from engram_memory.cli.main import main
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import Binding, ReferenceHost, connect
from engram_memory.contract.digests import principal_ref
from engram_memory.host.keys import HostSigningKey
from engram_memory.policy.authoring.build import build_bundle
from engram_memory.policy.authoring.default_bundle import default_bundle_dir
from engram_memory.policy.bundle import load_bundle_identity
from engram_memory.policy.opa_binary import find_opa_binary
from tests.cli_runner import run_cli
from tests.servers import http_server, server_env

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
ALICE = Binding("acme", "support", "user:alice", "purpose:support-case")
APPROVER = "human:test-operator"
HELD_EVIDENCE = "evidence:review/held"  # the shipped acme policy adjudicates evidence:review/*


@dataclass(frozen=True)
class Scenario:
    export: Path
    data_dir: Path
    record_id: str  # accepted, read, read by a foreign tenant, forgotten (phase 1)
    read_audit_id: str
    adjudicated: str  # candidate held, then accepted by human:dana (phase 1)
    adjudicated_record: str  # its record, read in phase 2
    pending: str  # candidate held in phase 2, never resolved
    withdrawn: str  # candidate held in phase 2, then withdrawn with a confirmation
    boundary: datetime  # between the two phases (naive UTC)
    revisions: tuple[str, str]
    env: dict[str, str]  # the server's environment (shipped bundle)


def _key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


def _value(outcome: Any) -> dict[str, Any]:
    assert outcome.envelope["ok"] is True, outcome.envelope
    value: dict[str, Any] = outcome.envelope["output"]["value"]
    return value


async def _held(host: ReferenceHost) -> str:
    captured = _value(
        await host.call(
            "engram_memory_capture",
            demo_capture_arguments("Needs a human look.", _key("cap"), evidence_ref=HELD_EVIDENCE),
        )
    )
    args = {"candidate_id": captured["candidate_id"], "idempotency_key": _key("adm")}
    outcome = _value(await host.call("engram_memory_request_admission", args))["outcome"]
    assert outcome["status"] == "pending_adjudication"
    return str(captured["candidate_id"])


async def _phase_one(url: str, signer: HostSigningKey, env: dict[str, str]) -> dict[str, str]:
    async with connect(url, signer, ALICE) as alice:
        captured = _value(
            await alice.call(
                "engram_memory_capture", demo_capture_arguments("Invoice disputed.", _key("c"))
            )
        )
        args = {"candidate_id": captured["candidate_id"], "idempotency_key": _key("adm")}
        admitted = _value(await alice.call("engram_memory_request_admission", args))
        record_id = str(admitted["outcome"]["record_id"])
        get = {"record_id": record_id, "purpose_ref": ALICE.purpose_ref}
        read = await alice.call("engram_memory_get", get)
        _value(read)
        carol = alice.rebind(tenant="globex", workspace="main", principal="user:carol")
        foreign = await carol.call("engram_memory_get", get)
        assert foreign.envelope["error"]["code"] == "NOT_FOUND"
        with pytest.raises(MCPError):
            await alice.call("engram_memory_search", {"query": "x", "purpose_ref": "purpose:x"})
        adjudicated = await _held(alice)
        decided = _admin(env, "adjudicate", adjudicated, "--decision", "accept", "--reason", "r:x")
        forget = {"record_id": record_id, "idempotency_key": _key("f"), "reason_ref": "r:gdpr"}
        token = alice.confirmation_for("engram_memory_forget", forget, record_id, APPROVER)
        _value(await alice.call("engram_memory_forget", forget, confirmation=token))
    return {
        "record_id": record_id,
        "read_audit_id": str(read.envelope["auditId"]),
        "adjudicated": adjudicated,
        "adjudicated_record": str(decided["record_id"]),
    }


async def _phase_two(url: str, signer: HostSigningKey, record_id: str) -> dict[str, str]:
    async with connect(url, signer, ALICE) as alice:
        _value(
            await alice.call(
                "engram_memory_get", {"record_id": record_id, "purpose_ref": ALICE.purpose_ref}
            )
        )
        search = {"query": "human look", "purpose_ref": ALICE.purpose_ref}
        served = _value(await alice.call("engram_memory_search", search))["records"]
        assert [packet["record"]["record_id"] for packet in served] == [record_id]
        pending = await _held(alice)
        withdrawn = await _held(alice)
        args = {"candidate_id": withdrawn, "idempotency_key": _key("w"), "reason_ref": "r:dup"}
        token = alice.confirmation_for("engram_memory_withdraw", args, withdrawn, "human:dana")
        _value(await alice.call("engram_memory_withdraw", args, confirmation=token))
    async with httpx.AsyncClient() as client:  # a request that is not JSON: host stream
        await client.post(url, content=b"{", headers={"content-type": "application/json"})
    return {"pending": pending, "withdrawn": withdrawn}


def _admin(env: dict[str, str], *argv: str) -> dict[str, Any]:
    who = ["--tenant", "acme", "--workspace", "support", "--operator", "human:dana"]
    # In this process (issue 19): the server holds the store, so this goes over its channel.
    done = run_cli(env, "admin", *who, *argv)
    assert done.returncode == 0, done.stderr
    value: dict[str, Any] = json.loads(done.stdout)["value"]
    return value


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    opa = find_opa_binary()
    if opa is None:
        pytest.skip("OPA binary not found (set ENGRAM_OPA_BIN)")
    base = tmp_path_factory.mktemp("audit-query")
    root_key, signing_key, public_keys = init_host_dir(base / "secrets")
    signer = HostSigningKey.from_pem_file(signing_key)
    data_dir = base / "data"
    env = server_env(data_dir, root_key, public_keys)
    second = base / "bundle-v2"
    build_bundle(REPO / "rego", REPO / "policies", second, label="v2", opa_bin=opa, run_tests=False)
    with http_server(env) as (_, url):
        first = anyio.run(_phase_one, url, signer, env)
    boundary = datetime.now(UTC).replace(tzinfo=None)
    with http_server({**env, "ENGRAM_BUNDLE": str(second)}) as (_, url):
        later = anyio.run(_phase_two, url, signer, first["adjudicated_record"])
    export = base / "export"
    assert main(["audit", "export", "--data-dir", str(data_dir), "--out", str(export)]) == 0
    revisions = (
        load_bundle_identity(default_bundle_dir()).revision,
        load_bundle_identity(second).revision,
    )
    return Scenario(
        export, data_dir, boundary=boundary, revisions=revisions, env=env, **first, **later
    )


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["audit", *argv])
    return code, capsys.readouterr().out


def _rows(
    capsys: pytest.CaptureFixture[str], scenario: Scenario, name: str, **params: str
) -> list[dict[str, Any]]:
    flags = [f"--param={key}={value}" for key, value in params.items()]
    code, out = _run(
        capsys, "query", name, *flags, "--export", str(scenario.export), "--format=json"
    )
    assert code == 0
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


def _since(scenario: Scenario) -> str:
    return scenario.boundary.isoformat() + "Z"


ALICE_REF = principal_ref("acme", "user:alice")
DANA_REF = principal_ref("acme", "human:dana")


def test_record_access_lists_every_call_on_the_record_and_its_candidate(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "record_access", target_id=scenario.adjudicated_record)
    assert [(r["tool"], r["outcome"], r["matched_id"]) for r in rows] == [
        ("engram_memory_capture", "ok", scenario.adjudicated),
        ("engram_memory_request_admission", "ok", scenario.adjudicated),
        ("admin:adjudicate", "ok", scenario.adjudicated),
        ("admin:adjudicate", "ok", scenario.adjudicated_record),
        ("engram_memory_get", "ok", scenario.adjudicated_record),
        ("engram_memory_search", "ok", scenario.adjudicated_record),
    ]
    assert rows[2]["principal_ref"] == DANA_REF
    later = _rows(
        capsys,
        scenario,
        "record_access",
        target_id=scenario.adjudicated_record,
        **{"from": _since(scenario)},
    )
    assert [(r["tool"], r["principal_ref"]) for r in later] == [
        ("engram_memory_get", ALICE_REF),
        ("engram_memory_search", ALICE_REF),
    ]
    earlier = _rows(
        capsys,
        scenario,
        "record_access",
        target_id=scenario.adjudicated_record,
        to=_since(scenario),
    )
    assert len(earlier) == 4


def test_who_read_record_names_the_reader_and_the_refused_foreigner(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "who_read_record", record_id=scenario.record_id)
    assert [(r["outcome"], r["principal_ref"]) for r in rows] == [
        ("ok", ALICE_REF),
        ("NOT_FOUND", principal_ref("globex", "user:carol")),
    ]
    assert all(r["recorded_at"].endswith("Z") for r in rows)
    assert (
        _rows(
            capsys,
            scenario,
            "who_read_record",
            record_id=scenario.record_id,
            **{"from": _since(scenario)},
        )
        == []
    )


def test_refusals_for_tenant_include_protocol_refusals_within_the_range(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "refusals_for_tenant", tenant="acme")
    assert [(r["tool"], r["outcome"]) for r in rows] == [("engram_memory_search", "rpc:-32603")]
    globex = _rows(capsys, scenario, "refusals_for_tenant", tenant="globex")
    assert [(r["tool"], r["outcome"]) for r in globex] == [("engram_memory_get", "NOT_FOUND")]
    assert (
        _rows(capsys, scenario, "refusals_for_tenant", tenant="acme", **{"from": _since(scenario)})
        == []
    )
    assert _rows(capsys, scenario, "refusals_for_tenant", tenant="acm") == []  # no prefix match


def test_decisions_per_revision_split_at_the_restart_under_the_second_bundle(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "decisions_per_revision")
    assert {r["bundle_revision"] for r in rows} == set(scenario.revisions)
    later = _rows(capsys, scenario, "decisions_per_revision", **{"from": _since(scenario)})
    assert {r["bundle_revision"] for r in later} == {scenario.revisions[1]}
    admission = [r for r in later if r["policy_path"] == "engram/admission/decision"]
    assert [r["decisions"] for r in admission] == [2]  # the two held in phase two


def test_which_bundle_decided_the_read_names_its_receipts(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "which_bundle_decided", audit_id=scenario.read_audit_id)
    assert {r["policy_path"] for r in rows} == {
        "engram/discovery/decision",
        "engram/authz/decision",
    }
    assert {r["bundle_revision"] for r in rows} == {scenario.revisions[0]}


def test_who_approved_names_the_human_behind_the_forget_and_the_withdraw(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "who_approved_destructive_calls")
    assert [(r["tool"], r["outcome"], r["approver"], r["event_id"]) for r in rows] == [
        ("engram_memory_forget", "ok", APPROVER, f"tombstone:{scenario.record_id}"),
        ("engram_memory_withdraw", "ok", "human:dana", f"withdraw:{scenario.withdrawn}"),
    ]
    later = _rows(capsys, scenario, "who_approved_destructive_calls", **{"from": _since(scenario)})
    assert [r["tool"] for r in later] == ["engram_memory_withdraw"]


def test_admissions_held_shows_each_hold_and_its_resolution(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "admissions_held")
    assert [
        (r["candidate_id"], r["resolution"], r["resolved_by"], r["record_id"]) for r in rows
    ] == [
        (scenario.adjudicated, "accept", DANA_REF, scenario.adjudicated_record),
        (scenario.pending, "pending", None, None),
        (scenario.withdrawn, "withdraw", ALICE_REF, None),
    ]
    assert [r["approver"] for r in rows] == [None, None, "human:dana"]
    assert all(r["requested_by"] == ALICE_REF for r in rows)
    assert rows[0]["resolving_sequence"] > rows[0]["held_sequence"]
    assert rows[1]["resolving_sequence"] is None
    later = _rows(capsys, scenario, "admissions_held", **{"from": _since(scenario)})
    assert [r["candidate_id"] for r in later] == [scenario.pending, scenario.withdrawn]


def test_revisions_in_force_show_the_rollover_at_the_restart(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "revisions_in_force")
    assert [r["bundle_revision"] for r in rows] == list(scenario.revisions)
    assert rows[0]["until"] == rows[1]["in_force_from"]
    assert rows[1]["until"] is None
    assert rows[0]["last_sequence"] < rows[1]["first_sequence"]
    assert rows[0]["refusals"] == 2  # the foreign read and the wrong purpose
    # The first revision was still in force at the boundary: it ended at the restart.
    spanning = _rows(capsys, scenario, "revisions_in_force", **{"from": _since(scenario)})
    assert [r["bundle_revision"] for r in spanning] == list(scenario.revisions)
    rollover = str(rows[1]["in_force_from"])
    later = _rows(capsys, scenario, "revisions_in_force", **{"from": rollover})
    assert [r["bundle_revision"] for r in later] == [scenario.revisions[1]]
    earlier = _rows(capsys, scenario, "revisions_in_force", to=rollover)
    assert [r["bundle_revision"] for r in earlier] == [scenario.revisions[0]]


def test_unconfirmed_mutations_list_captures_and_admissions_not_destructive_calls(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "unconfirmed_mutations", tenant="acme")
    tools = [r["tool"] for r in rows]
    assert tools.count("engram_memory_capture") == 4
    assert tools.count("engram_memory_request_admission") == 4
    assert "engram_memory_forget" not in tools
    assert "engram_memory_withdraw" not in tools
    assert not any(r["replay"] for r in rows)
    assert _rows(capsys, scenario, "unconfirmed_mutations", tenant="globex") == []


def test_error_rate_per_day_counts_refusals_against_the_days_calls(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "error_rate_per_day")
    codes = {r["code"]: r for r in rows}
    assert codes["NOT_FOUND"]["refusals"] == 1
    assert codes["rpc:-32603"]["refusals"] == 1
    assert any(code.startswith("host:") for code in codes)
    for row in rows:
        assert row["rate"] == pytest.approx(row["refusals"] / row["calls"], abs=1e-4)
    assert {r["day"] for r in rows} == {scenario.boundary.date().isoformat()} or len(rows) >= 3


def test_every_named_query_takes_an_optional_time_range_and_is_listed(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = load_named_queries()
    assert len(queries) >= 8
    for query in queries.values():
        ranges = [(p.name, p.kind, p.required) for p in query.params if p.name in ("from", "to")]
        assert ranges == [("from", "timestamp", False), ("to", "timestamp", False)], query.name
    assert {p.name for p in (REPO / "audit" / "queries").glob("*.sql")} == {
        f"{name}.sql" for name in queries
    }
    code, out = _run(capsys, "query", "--list", "--format", "json")
    assert code == 0
    assert [row["name"] for row in json.loads(out)] == sorted(queries)


@pytest.mark.parametrize(
    "argv",
    [
        ["query", "no_such_query"],
        ["query", "record_access"],  # its required target_id missing
        ["query", "record_access", "--param", "target_id=x", "--param", "target_id=y"],
        ["query", "record_access", "--param", "target_id=x", "--param", "colour=red"],
        ["query", "record_access", "--param", "target_id"],
        ["query", "error_rate_per_day", "--param", "from=last tuesday"],
        ["query", "error_rate_per_day", "--param", "to=2026-13-01"],
        ["query", "error_rate_per_day", "--param", "from=2026-12-02", "--param", "to=2026-12-02"],
        ["query"],
    ],
)
def test_an_unknown_query_parameter_or_bad_value_exits_2_with_one_line(
    scenario: Scenario, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    capsys.readouterr()
    assert main(["audit", *argv, "--export", str(scenario.export)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1


def test_csv_is_rfc_4180_and_carries_the_same_values_as_json(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "unconfirmed_mutations")
    code, out = _run(
        capsys, "query", "unconfirmed_mutations", "--export", str(scenario.export), "--format=csv"
    )
    assert code == 0
    assert out.endswith("\r\n")
    assert out.count("\r\n") == len(rows) + 1
    assert '"[""candidate_' in out  # a field holding quotes and commas is quoted, quotes doubled
    parsed = list(csv.reader(io.StringIO(out, newline="")))
    assert parsed[0] == list(rows[0])
    expected = [
        ["" if v is None else ("true" if v is True else "false" if v is False else str(v))]
        for row in rows
        for v in row.values()
    ]
    assert [[cell] for line in parsed[1:] for cell in line] == expected


def test_the_table_format_is_the_default_and_names_every_column(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _run(capsys, "query", "admissions_held", "--export", str(scenario.export))
    assert code == 0
    header, rule, *lines = out.splitlines()
    assert [c.strip() for c in header.split("|")][:4] == [
        "held_sequence",
        "held_at",
        "scope_ref",
        "candidate_id",
    ]
    assert set(rule) <= {"-", "+"}
    assert len(lines) == 3


def test_a_data_directory_is_queried_through_a_fresh_verified_export(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _run(
        capsys,
        "query",
        "admissions_held",
        "--data-dir",
        str(scenario.data_dir),
        "--format",
        "json",
    )
    assert code == 0
    assert json.loads(out) == _rows(capsys, scenario, "admissions_held")


def test_an_export_edited_after_it_was_written_is_refused(
    scenario: Scenario, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    copy = tmp_path / "export"
    copy.mkdir()
    for source in scenario.export.iterdir():
        (copy / source.name).write_bytes(source.read_bytes())
    with (copy / "journal_events.parquet").open("ab") as handle:
        handle.write(b"\0")
    assert main(["audit", "query", "error_rate_per_day", "--export", str(copy)]) == 1
    (copy / "manifest.json").unlink()
    assert main(["audit", "query", "error_rate_per_day", "--export", str(copy)]) == 2
    assert main(["audit", "sql", "--export", str(copy), "-c", "SELECT 1"]) == 2
    assert capsys.readouterr().out == ""


def test_audit_sql_answers_one_statement_over_the_exports_views(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = json.loads((scenario.export / "manifest.json").read_text())
    statement = "SELECT count(*) AS entries, max(sequence) AS head FROM audit_entries"
    code, out = _run(
        capsys, "sql", "--export", str(scenario.export), "-c", statement, "--format=json"
    )
    assert code == 0
    head = manifest["audit_head"]["sequence"]
    assert json.loads(out) == [{"entries": head, "head": head}]
    code, _ = _run(capsys, "sql", "--export", str(scenario.export), "-c", "SELECT nope FROM x")
    assert code == 2


def test_audit_sql_runs_a_script_from_stdin_and_stops_at_the_first_error(
    scenario: Scenario,
) -> None:
    command = ["audit", "sql", "--export", str(scenario.export), "--format", "csv"]
    script = "SELECT count(*) AS n\n  FROM journal_events;\nSELECT 'a,b' AS x;\n"
    done = run_cli(dict(os.environ), *command, input=script)  # stdin not a terminal: no prompt
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["x", '"a,b"']
    failing = run_cli(dict(os.environ), *command, input="SELECT nope;\nSELECT 1 AS one;\n")
    assert failing.returncode == 2
    assert failing.stdout == ""


def test_a_running_servers_data_directory_is_queried_without_stopping_it(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    env = scenario.env
    expected = _rows(capsys, scenario, "admissions_held")
    with http_server(env):
        command = ["audit", "query", "admissions_held"]
        command += ["--data-dir", str(scenario.data_dir), "--format", "json"]
        # The server holds the store: the export runs inside it, as an auditor with `read`.
        command += ["--tenant", "acme", "--workspace", "support", "--operator", "human:erin"]
        done = run_cli(env, *command)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected


def test_an_auditors_own_query_file_runs_with_bound_parameters(
    scenario: Scenario, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    own = tmp_path / "calls_per_tool.sql"
    own.write_text(
        "-- name: calls_per_tool\n"
        "-- description: Calls per tool.\n"
        "-- param: tool text: only this tool\n"
        "-- param: from timestamp: inclusive\n"
        "-- param: to timestamp: exclusive\n"
        "SELECT tool, sum(occurrences) AS calls FROM audit_entries\n"
        "WHERE ($tool IS NULL OR tool = $tool)\n"
        "  AND ($from IS NULL OR CAST(recorded_at AS TIMESTAMP) >= $from)\n"
        "  AND ($to IS NULL OR CAST(recorded_at AS TIMESTAMP) < $to)\n"
        "GROUP BY tool ORDER BY tool;\n"
    )
    export = ["--export", str(scenario.export), "--format=json"]
    tool = "--param=tool=engram_memory_get' OR '1'='1"  # bound, so it matches nothing
    code, out = _run(capsys, "query", "--file", str(own), tool, *export)
    assert (code, json.loads(out)) == (0, [])
    code, out = _run(capsys, "query", "--file", str(own), "--param=tool=engram_memory_get", *export)
    assert (code, json.loads(out)) == (0, [{"tool": "engram_memory_get", "calls": 3}])
    own.write_text("SELECT 1;\n")  # no header naming it
    assert _run(capsys, "query", "--file", str(own), *export)[0] == 2


def test_lifecycle_of_target_follows_the_record_back_to_its_candidate(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "lifecycle_of_target", target_id=scenario.record_id)
    assert [r["operation"] for r in rows] == ["capture", "accept", "tombstone"]
    assert rows[-1]["event_id"] == f"tombstone:{scenario.record_id}"
    held = _rows(capsys, scenario, "lifecycle_of_target", target_id=scenario.withdrawn)
    assert [r["operation"] for r in held] == ["capture", "withdraw"]
    since = {"from": _since(scenario)}
    assert (
        _rows(capsys, scenario, "lifecycle_of_target", target_id=scenario.record_id, **since) == []
    )


def test_host_refusals_count_the_request_that_was_not_json(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, scenario, "host_refusals")
    assert [(r["peer"], r["transport"], r["refusals"], r["entries"]) for r in rows] == [
        ("127.0.0.1", "http", 1, 1)
    ]
    assert _rows(capsys, scenario, "host_refusals", to=_since(scenario)) == []


def _typed_copy(export: Path, target: Path) -> None:
    """`export` with its timestamp columns typed TIMESTAMP (empty -> NULL), the manifest
    re-pinned: the shape of exports that type their timestamps (issue 10 item 10)."""
    target.mkdir()
    con = duckdb.connect()
    manifest = json.loads((export / "manifest.json").read_text())
    typed = (
        "SELECT * REPLACE (CAST(recorded_at AS TIMESTAMP) AS recorded_at, "
        "TRY_CAST(first_at AS TIMESTAMP) AS first_at, TRY_CAST(last_at AS TIMESTAMP) AS last_at)"
    )
    for entry in manifest["files"]:
        source, out = export / entry["name"], target / entry["name"]
        select = typed if entry["name"] == "audit_entries.parquet" else "SELECT *"
        con.execute(f"COPY ({select} FROM '{source}') TO '{out}' (FORMAT parquet)")
        entry["sha256"] = hashlib.sha256(out.read_bytes()).hexdigest()
    (target / "manifest.json").write_text(json.dumps(manifest))


def test_every_query_answers_the_same_on_an_export_with_typed_timestamps(
    scenario: Scenario, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    typed = tmp_path / "typed"
    _typed_copy(scenario.export, typed)
    params = {
        "record_access": {"target_id": scenario.adjudicated_record},
        "who_read_record": {"record_id": scenario.record_id},
        "refusals_for_tenant": {"tenant": "acme"},
        "which_bundle_decided": {"audit_id": scenario.read_audit_id},
        "lifecycle_of_target": {"target_id": scenario.record_id},
    }
    for name in load_named_queries():
        flags = [f"--param={k}={v}" for k, v in params.get(name, {}).items()]
        flags.append(f"--param=from={_since(scenario)}")
        answers = [
            _run(capsys, "query", name, *flags, "--export", str(source), "--format=json")
            for source in (scenario.export, typed)
        ]
        assert answers[0][0] == answers[1][0] == 0, name
        assert json.loads(answers[0][1]) == json.loads(answers[1][1]), name
