"""Elicitation answers and the sealed 2026-07-28 round-trip state."""

from __future__ import annotations

import mcp_types as types
import pytest

from engram_memory.gateway.confirm import (
    INPUT_KEY,
    PendingCall,
    RequestStates,
    answer_from_retry,
    answer_of,
    elicitation_message,
    input_required,
)
from tests.gateway.callers import DESKTOP_CALLER

CALLER = DESKTOP_CALLER
CALL = PendingCall("engram_memory_forget", "mem_abc", "sha256:" + "1" * 64, CALLER)


@pytest.mark.parametrize(
    ("action", "content", "reason"),
    [
        ("accept", {"confirm": True}, "accepted"),
        ("accept", {"confirm": False}, "declined"),
        ("accept", {"confirm": "true"}, "declined"),
        ("accept", None, "declined"),
        ("decline", None, "declined"),
        ("cancel", None, "cancelled"),
    ],
)
def test_only_an_accept_with_the_boolean_true_is_a_yes(
    action: str, content: dict[str, object] | None, reason: str
) -> None:
    answer = answer_of(types.ElicitResult(action=action, content=content))  # type: ignore[arg-type]
    assert answer.accepted is (reason == "accepted")
    assert answer.reason == reason


def test_the_message_names_tool_target_consequence_and_digest() -> None:
    message = elicitation_message(CALL)
    for part in (CALL.tool, CALL.target, CALL.op_digest, "cannot be recovered"):
        assert part in message


def _retry(state: str | None, action: str = "accept") -> types.CallToolRequestParams:
    responses = {INPUT_KEY: types.ElicitResult(action=action, content={"confirm": True})}  # type: ignore[arg-type]
    return types.CallToolRequestParams(
        name=CALL.tool, arguments={}, input_responses=responses, request_state=state
    )


def _tampered(state: str) -> str:
    return state[:-1] + ("1" if state[-1] == "0" else "0")


def test_a_sealed_state_releases_its_own_call_once() -> None:
    states = RequestStates(timeout_s=60)
    state = input_required(CALL, states).request_state
    assert answer_from_retry(_retry(state), CALL, states).accepted
    assert answer_from_retry(_retry(state), CALL, states).reason == "state_invalid"


def test_a_state_for_another_call_or_forged_or_absent_releases_nothing() -> None:
    states = RequestStates(timeout_s=60)
    state = states.seal(CALL)
    other = PendingCall(CALL.tool, "mem_other", CALL.op_digest, CALLER)
    assert answer_from_retry(_retry(state), other, states).reason == "state_invalid"
    assert answer_from_retry(_retry(_tampered(state)), CALL, states).reason == "state_invalid"
    assert answer_from_retry(_retry(None), CALL, states).reason == "state_invalid"
    assert answer_from_retry(_retry(RequestStates(60).seal(CALL)), CALL, states).reason == (
        "state_invalid"
    )


def test_a_state_older_than_the_timeout_is_timed_out() -> None:
    states = RequestStates(timeout_s=-1)  # already expired when sealed
    assert answer_from_retry(_retry(states.seal(CALL)), CALL, states).reason == "timed_out"


def test_a_declined_retry_is_declined() -> None:
    states = RequestStates(timeout_s=60)
    answer = answer_from_retry(_retry(states.seal(CALL), "decline"), CALL, states)
    assert (answer.accepted, answer.reason) == (False, "declined")
