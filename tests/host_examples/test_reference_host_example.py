"""examples/host/host.py against the real server over stdio and streamable HTTP (SPEC §7):
an explicit "yes" mints the confirmation and the record is forgotten; anything else sends
nothing and the record stays readable. The human's answers are piped to the host's stdin."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from engram_memory.store.database import Database
from tests.host_examples.conftest import BINDING, HOST_DIR, HOST_PY, HostRun, HostSetup

pytestmark = pytest.mark.e2e

CAPTURE_FILE = str(HOST_DIR / "capture.json")
FORGET = "engram_memory_forget"
WITHDRAW = "engram_memory_withdraw"
NOT_APPROVED, REFUSED = 3, 4


def _value(envelope: dict[str, Any]) -> dict[str, Any]:
    assert envelope["ok"] is True, envelope
    value: dict[str, Any] = envelope["output"]["value"]
    return value


def _code(envelope: dict[str, Any]) -> str:
    assert envelope["ok"] is False, envelope
    code: str = envelope["error"]["code"]
    return code


def _ok(run: HostRun) -> dict[str, Any]:
    assert run.returncode == 0, run.stderr
    return _value(run.envelope)


def _yes(setup: HostSetup) -> list[str]:
    # Over stdio the config names the approver; over HTTP the host asks for a name.
    return ["yes"] if setup.transport == "stdio" else ["yes", "dana"]


def _audited(data_dir: Path, tool: str) -> list[str]:
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            rows = tx.fetchall(
                "SELECT outcome FROM audit_entries WHERE tool = ? ORDER BY sequence", [tool]
            )
    finally:
        database.close()
    return [str(row[0]) for row in rows]


def test_no_sends_nothing_and_yes_mints_a_confirmation_and_forgets(host_setup: HostSetup) -> None:
    with host_setup.session() as host:
        host.type(f"capture {CAPTURE_FILE}")
        candidate_id = _value(host.read_document())["candidate_id"]
        host.type(f"admit {candidate_id}")
        record_id = _value(host.read_document())["outcome"]["record_id"]

        # Anything but an explicit yes is a no: nothing is printed, nothing is sent.
        host.type(f"forget {record_id}", "no")
        host.type(f"forget {record_id}", "yes please")
        host.type(f"get {record_id}")
        assert _value(host.read_document())["record"]["record_id"] == record_id

        host.type(f"forget {record_id}", *_yes(host_setup))
        forgotten = _value(host.read_document())
        assert (forgotten["replayed"], forgotten["receipt"]["to_state"]) == (False, "tombstoned")
        host.type(f"get {record_id}")
        assert _code(host.read_document()) == "NOT_FOUND"

    host_setup.stop_server()
    # Exactly one forget reached the server (every call, even a refused one, is audited).
    assert _audited(host_setup.data_dir, FORGET) == ["ok"]


def test_subcommands_exit_not_approved_without_a_yes_and_withdraw_with_one(
    http_host_setup: HostSetup,
) -> None:
    setup = http_host_setup
    candidate_id = _ok(setup.run("capture", CAPTURE_FILE))["candidate_id"]

    declined = setup.run("withdraw", candidate_id)  # end of input: no answer is a no
    assert (declined.returncode, declined.documents) == (NOT_APPROVED, [])

    answers = "".join(f"{line}\n" for line in _yes(setup))
    withdrawn = _ok(setup.run("withdraw", candidate_id, "--reason", "reason:dup", answers=answers))
    assert withdrawn["receipt"]["to_state"] == "withdrawn"
    setup.stop_server()
    assert _audited(setup.data_dir, WITHDRAW) == ["ok"]


def test_tools_the_policy_makes_confirmable_are_confirmed_when_configured(
    http_host_setup: HostSetup,
) -> None:
    """acme's policy data requires a confirmation for dave's captures and admissions."""
    dave = {**BINDING, "principal": "user:dave"}
    unaware = http_host_setup.with_config("unaware.json", binding=dave)
    assert unaware.run("capture", CAPTURE_FILE).returncode == REFUSED  # -32603: no confirmation

    aware = http_host_setup.with_config(
        "aware.json",
        binding=dave,
        confirm_tools=["engram_memory_capture", "engram_memory_request_admission"],
    )
    assert aware.run("capture", CAPTURE_FILE, answers="no\n").returncode == NOT_APPROVED
    captured = _ok(aware.run("capture", CAPTURE_FILE, answers="yes\ndave\n"))
    admitted = _ok(aware.run("admit", captured["candidate_id"], answers="yes\ndave\n"))
    assert admitted["outcome"]["status"] == "accepted"


def test_host_retries_an_unknown_outcome_with_the_same_key_and_gets_the_commit(
    lossy_stdio_host_setup: HostSetup,
) -> None:
    run = lossy_stdio_host_setup.run("capture", CAPTURE_FILE)
    assert run.returncode == 0, run.stderr
    lost, retried = run.documents
    assert (lost["error"]["code"], lost["error"]["retriable"]) == ("MUTATION_OUTCOME_UNKNOWN", True)
    assert _value(retried)["status"] == "duplicate_exact"
    database = Database.open(lossy_stdio_host_setup.data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            rows = tx.fetchall("SELECT target_id FROM journal_events WHERE operation = 'capture'")
    finally:
        database.close()
    assert rows == [(_value(retried)["candidate_id"],)]


def _example_host_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_host", HOST_PY)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the config models' annotations here
    spec.loader.exec_module(module)
    return module


def test_example_configurations_are_valid_host_configurations() -> None:
    host = _example_host_module()
    stdio = host.load_config(HOST_DIR / "host.stdio.yaml", {})
    assert stdio.server.command is not None
    assert stdio.server.url is None
    assert stdio.server.env["ENGRAM_MEMORY_ENABLED"] == "true"
    http = host.load_config(HOST_DIR / "host.http.yaml", {})
    assert http.server.url is not None
    assert http.server.command is None
    # The desktop client's entry has the keys of the host's `server` block, and launches the
    # gateway (a stock client cannot bind calls to the bare server).
    desktop = json.loads((HOST_DIR / "mcp-servers.json").read_text("utf-8"))
    entry = host.ServerConfig.model_validate(desktop["mcpServers"]["engram-memory"])
    assert entry.args[:2] == ["gateway", "--config"]


def test_the_example_host_signs_configured_groups_and_refuses_malformed_ones(
    tmp_path: Path,
) -> None:
    host = _example_host_module()
    config = tmp_path / "host.yaml"
    base = (HOST_DIR / "host.stdio.yaml").read_text("utf-8")
    member = "  groups: [group:b, group:a, group:b]\n"
    config.write_text(
        base.replace("  host_id: host:reference\n", "  host_id: host:reference\n" + member), "utf-8"
    )
    assert host.binding_of(host.load_config(config, {})).groups == ("group:a", "group:b")
    config.write_text(
        base.replace(
            "  host_id: host:reference\n", "  host_id: host:reference\n  groups: [advisors]\n"
        ),
        "utf-8",
    )
    with pytest.raises(host.ConfigError):
        host.load_config(config, {})
