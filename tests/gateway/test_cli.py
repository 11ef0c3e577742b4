"""`engram-memory gateway verify-audit` and the gateway's refusals before it serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.cli.main import main
from engram_memory.gateway.audit_log import GatewayAudit


def _log(tmp_path: Path) -> Path:
    path = tmp_path / "gateway-audit.jsonl"
    with GatewayAudit.open(path, "host:gw") as audit:
        for reason in ("declined", "accepted"):
            audit.record("confirmation", reason=reason, tool="engram_memory_forget")
    return path


def test_verify_audit_exits_0_on_a_sound_chain_and_1_naming_an_edited_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _log(tmp_path)
    assert main(["gateway", "verify-audit", str(path)]) == 0
    assert "2 entries" in capsys.readouterr().out
    path.write_text(path.read_text(encoding="utf-8").replace("declined", "accepted", 1))
    assert main(["gateway", "verify-audit", str(path)]) == 1
    assert "line 1" in capsys.readouterr().out


def test_verify_audit_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    assert main(["gateway", "verify-audit", str(tmp_path / "absent.jsonl")]) == 2


def test_the_gateway_without_a_configuration_exits_2() -> None:
    assert main(["gateway"]) == 2
