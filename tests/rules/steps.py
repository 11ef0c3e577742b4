"""Small helpers shared by the rule tests (on top of tests/harness.py and the tool helpers of
tests/tools/test_tool_rules.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.core.runtime import Services
from tests.harness import Caller

CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"
GET = "engram_memory_get"
SEARCH = "engram_memory_search"
SCOPE = "tenant:acme/workspace:support"
DAY_MS = 86_400_000


class Clock:
    """A settable epoch-ms clock (callable like `Services.clock_ms`)."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@dataclass
class ClockedCaller(Caller):
    """A Caller whose invocation contexts and confirmations are minted at `clock`'s time."""

    clock: Clock | None = None

    def _now_s(self) -> int:
        assert self.clock is not None
        return self.clock.now_ms // 1000

    def token(self, **overrides: Any) -> str:
        overrides.setdefault("now_s", self._now_s())
        return super().token(**overrides)

    def confirm(self, tool: str, arguments: dict[str, Any], target: str, **overrides: Any) -> str:
        overrides.setdefault("now_s", self._now_s())
        return super().confirm(tool, arguments, target, **overrides)


def capture_op(arguments: dict[str, Any]) -> str:
    """The operation digest a capture confirmation is bound to (its `target` too)."""
    return operation_digest(CAPTURE, normalize(arguments))


def journal_operations(services: Services, scope: str = SCOPE) -> list[str]:
    """The operations journaled in `scope`, in cursor order."""
    with services.database.transaction() as tx:
        rows = tx.fetchall(
            "SELECT operation FROM journal_events WHERE scope_ref = ? ORDER BY cursor", [scope]
        )
    return [str(row[0]) for row in rows]


def count_rows(services: Services, table: str) -> int:
    with services.database.transaction() as tx:
        row = tx.fetchone(f"SELECT count(*) FROM {table}")  # noqa: S608 - test-only, fixed names
    assert row is not None
    return int(row[0])


def get_args(caller: Caller, record_id: str) -> dict[str, Any]:
    return {"record_id": record_id, "purpose_ref": caller.purpose_ref}


def search_ids(caller: Caller, query: str) -> list[str]:
    """Record ids a search returns (fails the test on an error envelope)."""
    envelope = caller.call(SEARCH, {"query": query, "purpose_ref": caller.purpose_ref})
    assert envelope["ok"] is True, envelope
    return [packet["record"]["record_id"] for packet in envelope["output"]["value"]["records"]]


def files_holding(services: Services, needle: bytes) -> list[str]:
    """Every file of the data directory whose bytes contain `needle` (WAL folded first)."""
    services.database.checkpoint()
    root = services.keys.directory.parent
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and needle in p.read_bytes()
    )
