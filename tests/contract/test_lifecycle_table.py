"""SPEC §8's transition table, restated independently and checked pair by pair."""

from __future__ import annotations

import itertools

import pytest

from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.lifecycle import TRANSITIONS, next_state

AC, AD, H = "accepted_current", "accepted_disputed", "historical"
SPEC_TABLE = {
    ("accept", "pending"): "promoted",
    ("reject", "pending"): "rejected",
    ("withdraw", "pending"): "withdrawn",
    ("dispute", AC): AD,
    ("resolve_dispute", AD): AC,
    ("supersede", AC): H,
    ("supersede", AD): H,
    ("mark_non_current", AC): H,
    ("mark_non_current", AD): H,
    ("rewind", H): AC,
    **{("expire", s): "expired" for s in (AC, AD, H)},
    **{("trust_invalidate", s): "trust_invalid" for s in (AC, AD, H)},
    **{("tombstone", s): "tombstoned" for s in (AC, AD, H, "expired", "trust_invalid")},
}
STATES = (
    "pending",
    "rejected",
    "withdrawn",
    "promoted",
    AC,
    AD,
    H,
    "expired",
    "trust_invalid",
    "tombstoned",
)
TERMINAL = {"rejected", "withdrawn", "promoted", "tombstoned"}


@pytest.mark.parametrize(
    ("operation", "state"), list(itertools.product([*TRANSITIONS, "unknown"], STATES))
)
def test_every_operation_and_state_follows_the_spec_table(operation: str, state: str) -> None:
    expected = SPEC_TABLE.get((operation, state))
    if expected is not None:
        assert next_state(operation, state) == expected
        return
    with pytest.raises(ToolError) as refused:
        next_state(operation, state)
    assert refused.value.code.name == (
        "ALREADY_TERMINAL" if state in TERMINAL else "ILLEGAL_TRANSITION"
    )
