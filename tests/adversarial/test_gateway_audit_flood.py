"""A client provoking gateway audit lines in a loop writes a bounded, exact account (issue
23, finding 3), against the real `engram-memory gateway` process over stdio.

One client sends 300 calls of each kind the gateway refuses itself: a purpose it may not
use (-32603, `caller_refused`), a duplicate argument key (`INVALID_SCHEMA`, `call_refused`),
a forget while it never declared elicitation (`gate_failed`, `confirmation`). Before, each
was one fsynced line (1,000 lines in 8 s). Now each kind writes its burst (10) one by one
and one summary once the gateway stops, whose count makes the total exact; the chain
verifies. (10,000 of each kind, in-process: tests/gateway/test_audit_bound.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.gateway.audit_bound import DEFAULT_BURST
from engram_memory.gateway.audit_log import verify_audit
from tests.adversarial.test_gateway_hostile import RawGateway, _call, _capture, _forget
from tests.e2e.gateway_support import write_setup

PER_KIND = 300
_NO_ELICITATION = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "flooder", "version": "0"},
}


def test_three_hundred_refusals_of_each_kind_write_the_burst_and_one_summary_each(
    tmp_path: Path,
) -> None:
    setup = write_setup(tmp_path, init_host_dir(tmp_path / "secrets"), confirmation_timeout_s=30)
    gateway = RawGateway(setup)
    try:
        opening = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": _NO_ELICITATION}
        assert "result" in gateway.exchange(json.dumps(opening).encode())
        gateway.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        search = json.dumps({"query": "q", "purpose_ref": "purpose:other"})
        for index in range(PER_KIND):
            foreign = gateway.exchange(_call(1000 + index, "engram_memory_search", search))
            assert foreign["error"]["code"] == -32603
            duplicated = gateway.exchange(_capture(2000 + index, ',"text":"a","text":"b"'))
            assert duplicated["result"]["structuredContent"]["error"]["code"] == "INVALID_SCHEMA"
            unconfirmed = gateway.exchange(_forget(3000 + index))
            assert unconfirmed["result"]["structuredContent"]["error"]["code"] == "gate_failed"
    finally:
        gateway.close()
    entries = setup.gateway_audit()
    for event in ("caller_refused", "call_refused", "confirmation"):
        lines = [e for e in entries if e["event"] == event]
        summaries = [e for e in lines if "summary_count" in e.get("detail", {})]
        assert len(lines) == DEFAULT_BURST + 1, event
        assert [int(e["detail"]["summary_count"]) for e in summaries] == [
            PER_KIND - DEFAULT_BURST
        ], event
    assert verify_audit(setup.audit_log) == len(entries)
