"""`policy replay` on a store made by a real server deciding with the real OPA server (issue 22
item 4): alice and bob call it through the real MCP SDK client; the store is then replayed,
read-only, under a bundle that removes bob's grant, by the real OPA server (`--engine opa`)
and by the embedded engine. Both name exactly bob's decisions, and the same bundle none."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from engram_memory.policy.authoring.build import build_bundle
from engram_memory.policy.bundle import BUNDLE_FILE, DEFAULT_BUNDLE_DIR
from engram_memory.policy.opa_binary import find_opa_binary
from engram_memory.store.connection import DATABASE_FILE
from tests.cli_runner import run_cli
from tests.e2e.conftest import ALICE, Deployment
from tests.e2e.test_governed_session import _admit, _capture, _search

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
BOB = replace(ALICE, principal="user:bob")
BOB_GRANT = """      - principal: "user:bob"            # agent on the support desk
        roles: [reader]
        purposes: ["purpose:support-case"]
"""


def _tightened(directory: Path, opa: Path) -> Path:
    policies = directory / "policies"
    shutil.copytree(REPO / "policies", policies)
    acme = policies / "acme.yaml"
    acme.write_text(acme.read_text(encoding="utf-8").replace(BOB_GRANT, ""), encoding="utf-8")
    out = directory / "bundle"
    build_bundle(REPO / "rego", policies, out, label="tightened", opa_bin=opa, run_tests=False)
    return out


def _kept(data_dir: Path) -> dict[str, tuple[str, str]]:
    """decision id -> (the principal its kept input names, its domain)."""
    with duckdb.connect(str(data_dir / DATABASE_FILE), read_only=True) as con:
        rows = con.execute(
            "SELECT decision_id, input_json, policy_path FROM decision_inputs"
        ).fetchall()
    return {str(d): (str(json.loads(i).get("principal")), str(p).split("/")[1]) for d, i, p in rows}


@pytest.mark.parametrize("deployment", ["http-opa"], indirect=True)
async def test_replay_of_a_served_store_names_exactly_the_decisions_a_tightened_bundle_flips(
    deployment: Deployment, tmp_path: Path
) -> None:
    opa = find_opa_binary()
    assert opa is not None  # the deployment's OPA server ran it
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 2))
    async with deployment.host(ALICE) as alice:
        captured = await _capture(alice, "Courier refund for the lost parcel 4471.")
        await _admit(alice, captured["candidate_id"])
    async with deployment.host(BOB) as bob:
        assert len(await _search(bob, "parcel 4471")) == 1
    deployment.stop()
    ended = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2))
    kept = _kept(deployment.data_dir)
    # bob's grant decided his tool list and his search's authorization; his semantic channel
    # was refused before (the purpose does not permit it) and stays refused.
    bobs = {d for d, (who, domain) in kept.items() if who == "user:bob"}
    expected = {d for d in bobs if kept[d][1] in ("discovery", "authz")}
    assert expected
    assert expected < bobs

    bundle = _tightened(tmp_path / "candidate", opa)
    window = ("--store", str(deployment.data_dir), "--from", started, "--to", ended)
    json_out = ("--format", "json")
    reports = {}
    for engine, where in (("opa", bundle / BUNDLE_FILE), ("embedded", bundle)):
        result = run_cli(
            {}, "policy", "replay", "--bundle", str(where), "--engine", engine,
            "--opa", str(opa), *window, *json_out,
        )  # fmt: skip
        assert result.returncode == 1, result.stderr
        reports[engine] = json.loads(result.stdout)
    for report in reports.values():
        flipped = {item["decision_id"] for g in report["groups"] for item in g["sample"]}
        assert flipped == expected
        assert report["replayed"] == len(kept)
        assert report["missing"] == 0

    same = run_cli({}, "policy", "replay", "--bundle", str(DEFAULT_BUNDLE_DIR), *window)
    assert same.returncode == 0, same.stderr
