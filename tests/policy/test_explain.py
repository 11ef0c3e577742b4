"""`engram-memory policy explain` and `policy effective` over the shipped bundle, evaluated by
the embedded Wasm engine or a real OPA server."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from engram_memory.cli.main import main
from engram_memory.contract.exceptions import CallError
from engram_memory.contract.types import ToolName
from engram_memory.policy.authoring.calls import (
    Binding,
    ToolCall,
    parse_call,
    plan_call,
)
from engram_memory.policy.decider import PolicyDecider
from tests.policy.conftest import POLICIES_DIR, subject

BOB = [
    "--tenant", "acme", "--workspace", "support",
    "--principal", "user:bob", "--purpose", "purpose:support-case",
]  # fmt: skip


def _line_of(text: str, path: Path = POLICIES_DIR / "acme.yaml") -> int:
    """The 1-based line of the first line of `path` containing `text`."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["policy", *argv, "--policies", str(POLICIES_DIR), "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def _domain(explanation: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [d for d in explanation["domains"] if d["domain"] == name]
    return found


def test_explaining_a_denied_call_shows_the_deny_reason_and_the_grant_by_file_and_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, explanation = _json(capsys, "explain", *BOB, "--tool", "engram_memory_forget")
    assert code == 0
    authz = _domain(explanation, "authz")
    assert authz["summary"]["allow"] is False
    assert authz["summary"]["reasons"] == ["tool_not_granted"]
    grant_line = _line_of('principal: "user:bob"')
    assert any(f"acme.yaml:{grant_line}:" in s["source"] for s in authz["sources"])
    assert explanation["verdict"].startswith("refused")


def test_the_explained_decisions_are_those_the_service_decider_gets(
    capsys: pytest.CaptureFixture[str], default_decider: PolicyDecider
) -> None:
    code, explanation = _json(capsys, "explain", *BOB, "--tool", "engram_memory_search")
    assert code == 0
    bob = subject(principal="user:bob")
    assert _domain(explanation, "authz")["result"] == dict(
        default_decider.authz(bob, "engram_memory_search").decision.result
    )
    assert explanation["bundle_revision"] == default_decider.expected.revision
    redaction_line = _line_of("- name: support-case-view")
    sources = _domain(explanation, "authz")["sources"]
    assert any(f"acme.yaml:{redaction_line}:" in s["source"] for s in sources)


def test_the_planned_inputs_are_the_ones_the_decider_sends() -> None:
    binding = Binding(
        tenant="acme", workspace="support", principal="user:bob", purpose="purpose:support-case"
    )
    queries = plan_call(binding, ToolCall(tool="engram_memory_capture"))
    assert [q.domain for q in queries] == [
        "discovery", "confirmation", "authz", "retention", "reconciliation",
    ]  # fmt: skip
    authz = queries[2].input
    assert authz == {**authz, "tenant": "acme", "principal": "user:bob"}
    assert authz["tool"] == "engram_memory_capture"
    assert queries[3].input["retention"] == {"derivative_rule": "make-ineligible"}


def test_an_admission_call_explains_the_rule_that_rejected_the_candidate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, explanation = _json(
        capsys,
        "explain",
        *BOB,
        "--tool",
        "engram_memory_request_admission",
        "--evidence-ref",
        "evidence:untrusted/forum",
    )
    assert code == 0
    admission = _domain(explanation, "admission")
    assert admission["summary"]["outcome"] == "reject"
    reject_line = _line_of("    reject:")
    assert any(f"acme.yaml:{reject_line}:" in s["source"] for s in admission["sources"])


def test_a_call_file_explains_like_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call = tmp_path / "call.json"
    call.write_text(
        json.dumps(
            {
                "binding": {
                    "tenant": "acme",
                    "workspace": "support",
                    "principal": "user:dave",
                    "purpose": "purpose:support-case",
                },
                "call": {"tool": "engram_memory_capture", "derivative_rule": "retain"},
            }
        )
    )
    code, explanation = _json(capsys, "explain", "--call", str(call))
    assert code == 0
    assert _domain(explanation, "retention")["summary"]["reasons"] == ["retain_not_permitted"]
    assert _domain(explanation, "confirmation")["summary"]["required"] is True


def test_explain_on_a_real_opa_server_gives_the_embedded_answer(
    default_opa_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, embedded = _json(capsys, "explain", *BOB, "--tool", "engram_memory_get")
    code, served = _json(
        capsys, "explain", *BOB, "--tool", "engram_memory_get", "--opa", default_opa_url
    )
    assert code == 0
    assert served["engine"] != embedded["engine"]
    assert [d["result"] for d in served["domains"]] == [d["result"] for d in embedded["domains"]]


def test_sources_that_differ_from_the_bundle_give_no_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(POLICIES_DIR, tmp_path / "policies", ignore=shutil.ignore_patterns("tests"))
    acme = tmp_path / "policies" / "acme.yaml"
    acme.write_text(acme.read_text().replace("ttl_seconds: 120", "ttl_seconds: 60"))
    code = main(
        ["policy", "explain", *BOB, "--tool", "engram_memory_get", "--policies",
         str(tmp_path / "policies"), "--json"]
    )  # fmt: skip
    assert code == 0
    explanation = json.loads(capsys.readouterr().out)
    sources = [s["source"] for d in explanation["domains"] for s in d["sources"]]
    assert sources
    assert not any("acme.yaml" in source for source in sources)


@pytest.mark.parametrize(
    "argv",
    [
        ["--tenant", "acme", "--workspace", "support", "--tool", "engram_memory_get"],
        [*BOB, "--tool", "engram_memory_delete"],
        [*BOB],
        [*BOB, "--tool", "engram_memory_capture", "--expires-at", "tomorrow"],
        [*BOB, "--tool", "engram_memory_capture", "--derivative-rule", "keep"],
        [*BOB, "--tool", "maintenance"],
        [*BOB, "--tool", "engram_memory_get", "--group", "admins"],
        [*BOB, "--tool", "engram_memory_get", "--call", "/nonexistent/call.json"],
        [*BOB, "--tool", "engram_memory_get", "--bundle", "/nonexistent"],
    ],
    ids=[
        "no-principal", "unknown-tool", "no-tool", "bad-instant", "bad-rule",
        "maintenance-without-operator", "group-without-prefix", "missing-call-file",
        "missing-bundle",
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "explain", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1


def test_effective_lists_what_a_principal_may_do(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _json(capsys, "effective", *BOB, "--operator", "human:erin")
    assert code == 0
    tools = report["tools"]
    assert {t for t, row in tools.items() if row["allowed"]} == {
        "engram_memory_search",
        "engram_memory_get",
    }
    assert tools["engram_memory_get"]["redaction"]["rule"] == "support-case-view"
    assert tools["engram_memory_forget"]["confirmation"]["required"] is True
    assert [limit["name"] for limit in report["rate_limits"]] == ["support-desk-readers"]
    assert report["maintenance"]["read"]["allow"] is True
    assert report["maintenance"]["maintain"]["allow"] is False
    assert "capture" not in report


def test_effective_shows_the_retention_a_contributor_gets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dave = [a if a != "user:bob" else "user:dave" for a in BOB]
    code, report = _json(capsys, "effective", *dave)
    assert code == 0
    capture = report["capture"]
    assert capture["default_expiry_ms"] == 90 * 86_400_000
    assert capture["retain_allowed"] is False
    assert capture["expiry_in_100_years"]["reasons"] == ["expires_beyond_ceiling"]
    assert capture["ceiling_ms"] == 365 * 86_400_000
    assert capture["consented_families"] == ["family:support-case-notes"]


def test_the_text_report_names_file_and_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "effective", *BOB, "--policies", str(POLICIES_DIR)]) == 0
    grant_line = _line_of('principal: "user:bob"')
    assert f"acme.yaml:{grant_line}:" in capsys.readouterr().out


def test_every_tool_and_maintenance_can_be_explained_and_nothing_else() -> None:
    for tool in (*ToolName, "maintenance"):
        assert parse_call({"tool": tool}).tool == tool
    with pytest.raises(CallError):
        parse_call({"tool": "engram_memory_unknown"})


def test_an_engine_that_does_not_answer_explains_as_policy_unavailable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    code, explanation = _json(capsys, "explain", *BOB, "--tool", "engram_memory_get", "--opa", url)
    assert code == 0
    assert explanation["verdict"].startswith("POLICY_UNAVAILABLE")
    assert all("error" in d["summary"] for d in explanation["domains"])


@pytest.mark.parametrize(
    "document",
    ['{"binding": 5}', '{"call": [1]}', "[1]", "NaN-not-json", '{"binding": {}, "extra": 1}'],
    ids=["binding-not-object", "call-not-object", "not-object", "not-json", "extra-member"],
)
def test_a_call_file_of_the_wrong_shape_exits_2_with_one_line(
    document: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call = tmp_path / "call.json"
    call.write_text(document)
    assert main(["policy", "explain", "--call", str(call)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1


def test_explain_and_effective_show_the_semantic_channel_decision_and_its_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    research = [a if a != "purpose:support-case" else "purpose:case-research" for a in BOB]
    code, explanation = _json(capsys, "explain", *research, "--tool", "engram_memory_search")
    assert code == 0
    semantic = _domain(explanation, "semantic")
    assert semantic["summary"] == {"allow": True, "reasons": ["semantic_purpose_permitted"]}
    purpose_line = _line_of('purposes: ["purpose:case-research"]')
    assert any(f"acme.yaml:{purpose_line}:" in s["source"] for s in semantic["sources"])
    code, report = _json(capsys, "effective", *BOB)
    assert code == 0
    assert report["semantic_search"] == {"allowed": False, "reasons": ["purpose_not_permitted"]}
