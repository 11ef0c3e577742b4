"""The lifecycle transition table of SPEC §8, checked before any cursor is allocated.

One table serves the agent tools and host maintenance alike, so a transition is legal in
exactly one place. Terminal states refuse everything with ALREADY_TERMINAL; any other
unlisted (operation, state) pair is ILLEGAL_TRANSITION (project decision).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError

# Candidate states (internal `promoted` after acceptance) and record states.
PENDING = "pending"
ACCEPTED_CURRENT = "accepted_current"
ACCEPTED_DISPUTED = "accepted_disputed"
HISTORICAL = "historical"
EXPIRED = "expired"
TRUST_INVALID = "trust_invalid"
TOMBSTONED = "tombstoned"

TERMINAL_STATES = frozenset({"rejected", "withdrawn", "promoted", TOMBSTONED})

_LIVE_RECORD = (ACCEPTED_CURRENT, ACCEPTED_DISPUTED, HISTORICAL)

# operation -> {from state: to state}
TRANSITIONS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "accept": {PENDING: "promoted"},
        "reject": {PENDING: "rejected"},
        "withdraw": {PENDING: "withdrawn"},
        "dispute": {ACCEPTED_CURRENT: ACCEPTED_DISPUTED},
        "resolve_dispute": {ACCEPTED_DISPUTED: ACCEPTED_CURRENT},
        "supersede": {ACCEPTED_CURRENT: HISTORICAL, ACCEPTED_DISPUTED: HISTORICAL},
        "mark_non_current": {ACCEPTED_CURRENT: HISTORICAL, ACCEPTED_DISPUTED: HISTORICAL},
        "rewind": {HISTORICAL: ACCEPTED_CURRENT},
        "expire": dict.fromkeys(_LIVE_RECORD, EXPIRED),
        "trust_invalidate": dict.fromkeys(_LIVE_RECORD, TRUST_INVALID),
        "tombstone": dict.fromkeys((*_LIVE_RECORD, EXPIRED, TRUST_INVALID), TOMBSTONED),
    }
)


def next_state(operation: str, from_state: str) -> str:
    """The state `operation` leads to from `from_state`.

    Raises:
        ToolError: ALREADY_TERMINAL if `from_state` is terminal; ILLEGAL_TRANSITION if the
            table has no such transition (including unknown operations).
    """
    if from_state in TERMINAL_STATES:
        raise ToolError(ErrorCode.ALREADY_TERMINAL, f"{operation} from terminal {from_state}")
    to_state = TRANSITIONS.get(operation, {}).get(from_state)
    if to_state is None:
        raise ToolError(ErrorCode.ILLEGAL_TRANSITION, f"{operation} from {from_state}")
    return to_state
