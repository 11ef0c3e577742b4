"""The import counts each line's calls against the rate limits in line order, where the tool
counts them, whether the line's own work ran in this process or in worker processes (whose
limiter only notes what was asked: bulk/line_work.py `DeferredRateLimits`). A limited call is
refused with RATE_LIMITED, audited with the one decision made before the count (discovery),
and writes nothing else."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from engram_memory.admin.maintenance import Operator
from engram_memory.admin.verification import verify_store
from engram_memory.bulk.importer import ImportBinding
from engram_memory.cli.bulk_import import import_file
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.rate_limits import RateLimiter
from engram_memory.crypto.keys import RootKey
from engram_memory.policy.decider import DISCOVERY_PATH, RateLimit
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.database import Database
from tests.admin.test_import import FROZEN_MS, PURPOSE, ROOT, SESSION, _services

LIMITED_CALL = 3  # the second line's capture (each line is a capture, then an admission)


class ThirdCallLimited(RateLimiter):
    """Refuses the third call it counts, whatever the limits (the plumbing is under test)."""

    def __init__(self) -> None:
        super().__init__()
        self.counted = 0

    def admit(
        self, scope_ref: str, principal: str, limits: Sequence[RateLimit], now_ms: int
    ) -> str | None:
        self.counted += 1
        return "test-limit" if self.counted == LIMITED_CALL else None


def _line(n: int) -> str:
    arguments = demo_capture_arguments(f"Refund {n} approved.", f"import-rate-{n:04d}")
    arguments["payload"]["valid_time"] = {"t": FROZEN_MS - 60_000}
    arguments["payload"]["primary_event"]["at"] = FROZEN_MS - 60_000
    return json.dumps(arguments)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_rate_limited_line_is_refused_in_line_order_and_audited_with_discovery_only(
    tmp_path: Path, engine: EmbeddedWasmEngine, workers: int
) -> None:
    source = tmp_path / "corpus.jsonl"
    source.write_text("\n".join(_line(n) for n in range(4)) + "\n", encoding="utf-8")
    data = tmp_path / "data"
    limiter = ThirdCallLimited()
    services = replace(_services(data, engine, RootKey(ROOT)), rate_limiter=limiter)
    binding = ImportBinding("acme", "support", "user:alice", PURPOSE, SESSION)
    who = Operator("acme", "support", "human:dana")
    summary = import_file(services, who, binding, source, batch=2, workers=workers)
    services.database.close()
    assert summary == {"lines": 4, "accepted": 3, "RATE_LIMITED": 1}
    assert limiter.counted == 7  # the limited line's admission never ran
    database = Database.open(data, read_only=True)
    try:
        with database.reading() as tx:
            entries = tx.fetchall(
                "SELECT outcome, target_ids_json, idempotency_key_digest, receipt_digests_json"
                " FROM audit_entries WHERE tool = 'engram_memory_capture' ORDER BY sequence"
            )
            paths = dict(tx.fetchall("SELECT receipt_digest, policy_path FROM decision_receipts"))
            records = tx.fetchall("SELECT count(*) FROM records")
    finally:
        database.close(checkpoint=False)
    assert [outcome for outcome, *_ in entries] == ["ok", "RATE_LIMITED", "ok", "ok"]
    _, targets, key_digest, receipts = entries[1]
    assert json.loads(targets) == []
    assert key_digest in ("", None)
    assert [paths[d] for d in json.loads(receipts)] == [DISCOVERY_PATH]
    assert records == [(3,)]
    assert verify_store(data, None).entries > 0
