"""Item 5: racing calls with one idempotency key execute once; every other call replays.

Sixteen SDK clients, each on its own streamable-HTTP session to the real server process,
send the same mutation with the same key and arguments at the same moment (withdraw and
forget each with its own fresh confirmation, as a retrying host would). Exactly one call
executes; every other one answers with the replay of that committed result, or
MUTATION_OUTCOME_UNKNOWN while the first is still in flight, and never NOT_FOUND or
ALREADY_TERMINAL. A later sequential retry always settles on the one committed result.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import CallOutcome
from tests.faults.perf_support import (
    CLIENTS,
    Clients,
    LiveServer,
    code_of,
    fresh_key,
    live_server,
    value_of,
)

__all__ = ["live_server"]

pytestmark = pytest.mark.e2e

CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"
# Several rounds per tool: one race may by chance not interleave.
ROUNDS = 3
IN_FLIGHT = "MUTATION_OUTCOME_UNKNOWN"


def _settled(outcomes: list[CallOutcome], is_first: Any, same: Any) -> dict[str, Any]:
    """Assert one execution among `outcomes`; return its result."""
    assert len(outcomes) == CLIENTS
    codes = [code_of(o) for o in outcomes]
    assert set(codes) <= {None, IN_FLIGHT}, codes
    values = [value_of(o) for o in outcomes if code_of(o) is None]
    firsts = [v for v in values if is_first(v)]
    assert len(firsts) == 1, [is_first(v) for v in values]
    first = firsts[0]
    for value in values:
        assert same(value) == same(first)
    return first


async def _captured(clients: Clients) -> dict[str, Any]:
    arguments = demo_capture_arguments("Refund approved after courier loss.", fresh_key("cap"))
    return value_of(await clients.hosts[0].call(CAPTURE, arguments))


async def _admitted(clients: Clients) -> str:
    candidate = await _captured(clients)
    arguments = {"candidate_id": candidate["candidate_id"], "idempotency_key": fresh_key("adm")}
    record_id: str = value_of(await clients.hosts[0].call(ADMIT, arguments))["outcome"]["record_id"]
    return record_id


async def _capture_race(server: LiveServer) -> None:
    async with Clients(server) as clients:
        for _ in range(ROUNDS):
            arguments = demo_capture_arguments("Racing refund capture.", fresh_key("race-cap"))
            first = _settled(
                await clients.race(CAPTURE, arguments),
                lambda v: v["status"] == "committed_pending",
                lambda v: (v["candidate_id"], v["cursor"], v["transaction_receipt_digest"]),
            )
            retry = value_of(await clients.hosts[0].call(CAPTURE, arguments))
            assert (retry["status"], retry["cursor"]) == ("duplicate_exact", first["cursor"])


async def _admission_race(server: LiveServer) -> None:
    async with Clients(server) as clients:
        for _ in range(ROUNDS):
            candidate = await _captured(clients)
            arguments = {
                "candidate_id": candidate["candidate_id"],
                "idempotency_key": fresh_key("race-adm"),
            }
            first = _settled(
                await clients.race(ADMIT, arguments),
                lambda v: v["replayed"] is False,
                lambda v: v["outcome"],
            )
            retry = value_of(await clients.hosts[0].call(ADMIT, arguments))
            assert (retry["replayed"], retry["outcome"]) == (True, first["outcome"])


async def _withdraw_race(server: LiveServer) -> None:
    async with Clients(server) as clients:
        for _ in range(ROUNDS):
            candidate_id = (await _captured(clients))["candidate_id"]
            arguments = {
                "candidate_id": candidate_id,
                "idempotency_key": fresh_key("race-wd"),
                "reason_ref": "reason:race",
            }
            first = _settled(
                await clients.race(WITHDRAW, arguments, confirm_target=candidate_id),
                lambda v: v["replayed"] is False,
                lambda v: v["receipt"],
            )
            token = clients.hosts[0].confirmation_for(
                WITHDRAW, arguments, candidate_id, "human:retry"
            )
            retry = value_of(await clients.hosts[0].call(WITHDRAW, arguments, confirmation=token))
            assert (retry["replayed"], retry["receipt"]) == (True, first["receipt"])


async def _forget_race(server: LiveServer) -> None:
    async with Clients(server) as clients:
        for _ in range(ROUNDS):
            record_id = await _admitted(clients)
            arguments = {
                "record_id": record_id,
                "idempotency_key": fresh_key("race-fgt"),
                "reason_ref": "reason:race",
            }
            first = _settled(
                await clients.race(FORGET, arguments, confirm_target=record_id),
                lambda v: v["replayed"] is False,
                lambda v: v["receipt"],
            )
            token = clients.hosts[0].confirmation_for(FORGET, arguments, record_id, "human:retry")
            retry = value_of(await clients.hosts[0].call(FORGET, arguments, confirmation=token))
            assert (retry["replayed"], retry["receipt"]) == (True, first["receipt"])


def test_racing_captures_with_one_key_commit_one_candidate_and_replay_it(
    live_server: LiveServer,
) -> None:
    anyio.run(_capture_race, live_server)


def test_racing_admissions_with_one_key_decide_once_and_never_answer_not_found(
    live_server: LiveServer,
) -> None:
    anyio.run(_admission_race, live_server)


def test_racing_withdrawals_with_one_key_withdraw_once_and_never_answer_already_terminal(
    live_server: LiveServer,
) -> None:
    anyio.run(_withdraw_race, live_server)


def test_racing_forgets_with_one_key_tombstone_once_and_never_answer_already_terminal(
    live_server: LiveServer,
) -> None:
    anyio.run(_forget_race, live_server)
