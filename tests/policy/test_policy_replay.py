"""`policy replay` (issue 22 item 4): decision inputs kept beside their receipts, checked by
`audit verify` and pruned by compaction; a candidate bundle re-decides them on a store made
by real calls, read-only, and the report names exactly the decisions that would change."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from engram_memory.admin.compaction import CompactionService
from engram_memory.admin.maintenance import Operator
from engram_memory.core.runtime import Services
from engram_memory.policy.authoring.build import build_bundle
from engram_memory.policy.bundle import BUNDLE_FILE, DEFAULT_BUNDLE_DIR
from engram_memory.store import audit
from tests.cli_runner import run_cli
from tests.harness import Caller
from tests.policy.conftest import POLICIES_DIR, REGO_DIR
from tests.rules.steps import search_ids
from tests.tools.test_tool_rules import accepted_record

DANA = Operator("acme", "support", "human:dana")  # maintain in acme/support
BOB_GRANT = """      - principal: "user:bob"            # agent on the support desk
        roles: [reader]
        purposes: ["purpose:support-case"]
"""


@pytest.fixture(scope="module")
def tightened_bundle(opa_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped sources with one rule tightened: bob's reader grant removed."""
    root = tmp_path_factory.mktemp("tightened")
    policies = root / "policies"
    shutil.copytree(POLICIES_DIR, policies)
    acme = policies / "acme.yaml"
    text = acme.read_text(encoding="utf-8")
    assert BOB_GRANT in text
    acme.write_text(text.replace(BOB_GRANT, ""), encoding="utf-8")
    out = root / "bundle"
    build_bundle(REGO_DIR, policies, out, label="tightened", opa_bin=opa_bin, run_tests=False)
    return out


def _store_made_by_calls(services: Services, alice: Caller) -> tuple[Path, int]:
    """alice (steward) captures and admits; bob (reader) searches; returns the data
    directory, closed, and the instant before the first call."""
    started = int(time.time() * 1000) - 1000
    word = "replayparcel"
    record = accepted_record(alice, f"Parcel {word} refunded.")
    bob = alice.as_(principal="user:bob")
    assert search_ids(bob, word) == [record]
    assert search_ids(alice, word) == [record]
    services.database.close()  # projects the call log: every entry is in the file
    return services.keys.directory.parent, started


def _window(started: int) -> list[str]:
    def iso(ms: int) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + "Z"

    return ["--from", iso(started - 1000), "--to", iso(int(time.time() * 1000) + 2000)]


def _kept(data_dir: Path) -> dict[str, dict[str, object]]:
    """decision id -> kept input, read straight from the file (a read-only connection)."""
    import duckdb

    connection = duckdb.connect(str(data_dir / "engram.duckdb"), read_only=True)
    try:
        rows = connection.execute("SELECT decision_id, input_json FROM decision_inputs").fetchall()
    finally:
        connection.close()
    return {str(d): json.loads(i) for d, i in rows}


def _snapshot(data_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(data_dir)): p.read_bytes() for p in data_dir.rglob("*") if p.is_file()
    }


def test_replay_names_exactly_the_decisions_a_tightened_rule_flips_and_writes_nothing(
    services: Services, alice: Caller, tightened_bundle: Path
) -> None:
    data_dir, started = _store_made_by_calls(services, alice)
    kept = _kept(data_dir)
    bobs = {d for d, policy_input in kept.items() if policy_input.get("principal") == "user:bob"}
    assert bobs
    assert len(bobs) < len(kept)
    before = _snapshot(data_dir)

    result = run_cli(
        {},
        "policy", "replay", "--bundle", str(tightened_bundle), "--store", str(data_dir),
        *_window(started), "--format", "json",
    )  # fmt: skip

    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["missing"] == 0
    assert report["replayed"] == len(kept)
    flipped = {item["decision_id"] for g in report["groups"] for item in g["sample"]}
    # bob lost his grant: his discovery (visible tools) and authorization decisions change,
    # and nobody else's; the sample holds every one here (far below its bound).
    assert flipped == bobs
    assert report["flipped"] == len(bobs)
    groups = {(g["tenant"], g["domain"]): g for g in report["groups"]}
    assert groups[("acme", "authz")]["flips"] == [{"change": "allow→deny", "count": 1}]
    (discovery,) = groups[("acme", "discovery")]["flips"]
    assert "visible_tools" in discovery["change"]
    assert all(
        g["unchanged"] == g["replayed"]
        for k, g in groups.items()
        if k[1] not in ("authz", "discovery")
    )
    assert "replay: done" in result.stderr  # progress goes to stderr, the report to stdout
    assert _snapshot(data_dir) == before  # read-only: every file byte for byte, none added


def test_replay_under_the_same_bundle_changes_nothing(services: Services, alice: Caller) -> None:
    data_dir, started = _store_made_by_calls(services, alice)
    result = run_cli(
        {},
        "policy", "replay", "--bundle", str(DEFAULT_BUNDLE_DIR), "--store", str(data_dir),
        *_window(started),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "0 would change" in result.stdout
    assert "allow→deny" not in result.stdout
    other_tenant = run_cli(
        {},
        "policy", "replay", "--bundle", str(DEFAULT_BUNDLE_DIR), "--store", str(data_dir),
        *_window(started), "--tenant", "globex", "--format", "json",
    )  # fmt: skip
    assert other_tenant.returncode == 0, other_tenant.stderr
    assert json.loads(other_tenant.stdout)["groups"] == []


def test_a_store_held_by_a_running_service_is_refused_and_left_alone(
    services: Services, alice: Caller
) -> None:
    accepted_record(alice, "Parcel held refunded.")
    data_dir = services.keys.directory.parent
    result = run_cli(
        {},
        "policy", "replay", "--bundle", str(DEFAULT_BUNDLE_DIR), "--store", str(data_dir),
        "--from", "2026-01-01", "--to", "2027-01-01",
    )  # fmt: skip
    assert result.returncode == 2
    assert search_ids(alice, "held") != []  # the service goes on serving


def test_replay_with_the_real_opa_server_agrees(
    services: Services, alice: Caller, tightened_bundle: Path, opa_bin: Path
) -> None:
    data_dir, started = _store_made_by_calls(services, alice)
    args = ["policy", "replay", "--store", str(data_dir), *_window(started), "--format", "json"]
    wasm = run_cli({}, *args, "--bundle", str(tightened_bundle))
    opa = run_cli(
        {}, *args, "--bundle", str(tightened_bundle / BUNDLE_FILE), "--engine", "opa",
        "--opa", str(opa_bin),
    )  # fmt: skip
    assert (wasm.returncode, opa.returncode) == (1, 1), opa.stderr
    strip = ("engine",)
    one, two = json.loads(wasm.stdout), json.loads(opa.stdout)
    assert {k: v for k, v in one.items() if k not in strip} == {
        k: v for k, v in two.items() if k not in strip
    }


def _alter_a_kept_input(data_dir: Path) -> None:
    import duckdb

    connection = duckdb.connect(str(data_dir / "engram.duckdb"))
    try:
        connection.execute(
            "UPDATE decision_inputs SET input_json = replace(input_json, 'user:alice', "
            "'user:mallory') WHERE decision_id = (SELECT min(decision_id) FROM decision_inputs "
            "WHERE input_json LIKE '%user:alice%')"
        )
        connection.execute("CHECKPOINT")
    finally:
        connection.close()


def test_an_altered_kept_input_fails_audit_verify(services: Services, alice: Caller) -> None:
    accepted_record(alice, "Parcel alterable refunded.")
    data_dir = services.keys.directory.parent
    services.database.close()
    assert run_cli({}, "audit", "verify", "--data-dir", str(data_dir)).returncode == 0
    _alter_a_kept_input(data_dir)
    assert run_cli({}, "audit", "verify", "--data-dir", str(data_dir)).returncode == 1


def test_pruning_kept_inputs_leaves_the_chain_verifiable(services: Services, alice: Caller) -> None:
    accepted_record(alice, "Parcel prunable refunded.")
    services.database.project()
    with services.database.transaction() as tx:
        entries, receipts = audit.verify(tx)
        (kept,) = tx.fetchone("SELECT count(*) FROM decision_inputs") or (0,)
    assert kept == receipts > 0

    services.settings = replace(services.settings, decision_input_retention_days=0)
    result = CompactionService(services).compact(DANA, lambda _: None)

    assert result["decision_inputs_pruned"] == kept
    with services.database.transaction() as tx:
        assert audit.verify(tx)[0] > entries  # the compaction's own entry, chained after
        (left,) = tx.fetchone("SELECT count(*) FROM decision_inputs") or (0,)
    assert left == 0
    data_dir = services.keys.directory.parent
    services.database.close()
    assert run_cli({}, "audit", "verify", "--data-dir", str(data_dir)).returncode == 0


def test_pruned_inputs_are_reported_missing_and_a_bad_window_is_a_usage_error(
    services: Services, alice: Caller
) -> None:
    services.settings = replace(services.settings, decision_input_retention_days=0)
    data_dir, started = _store_made_by_calls(services, alice)
    result = run_cli(
        {},
        "policy", "replay", "--bundle", str(DEFAULT_BUNDLE_DIR), "--store", str(data_dir),
        *_window(started), "--format", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["replayed"] == 0
    assert report["missing"] > 0
    backwards = run_cli(
        {},
        "policy", "replay", "--bundle", str(DEFAULT_BUNDLE_DIR), "--store", str(data_dir),
        "--from", "2026-12-02", "--to", "2026-12-01",
    )  # fmt: skip
    assert backwards.returncode == 2
    lone = run_cli(
        {},
        "policy", "replay", "--bundle", str(DEFAULT_BUNDLE_DIR / BUNDLE_FILE), "--store",
        str(data_dir), "--from", "2026-12-01", "--to", "2026-12-02", "--engine", "nope",
    )  # fmt: skip
    assert lone.returncode == 2
