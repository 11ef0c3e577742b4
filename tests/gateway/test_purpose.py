"""The purpose rule: a declared purpose binds only if it is one of the caller's."""

from __future__ import annotations

import pytest

from engram_memory.gateway.caller import Caller
from engram_memory.gateway.server import bound_purpose, purpose_argument

CALLER = Caller(
    tenant="acme",
    workspace="support",
    principal="user:alice",
    agent_id="agent:desktop",
    session="session:gw-test",
    approver="human:alice",
    purposes=("purpose:support-case", "purpose:caf\u00e9"),
)


@pytest.mark.parametrize(
    ("tool", "arguments", "declared"),
    [
        ("engram_memory_search", {"purpose_ref": "p"}, "p"),
        ("engram_memory_get", {"purpose_ref": "p"}, "p"),
        ("engram_memory_capture", {"payload": {"purpose_ref": "p"}}, "p"),
        ("engram_memory_capture", {"payload": "not an object"}, None),
        ("engram_memory_forget", {"purpose_ref": "p"}, None),
        ("engram_memory_search", None, None),
    ],
)
def test_the_purpose_argument_is_read_where_each_tool_declares_it(
    tool: str, arguments: dict[str, object] | None, declared: object
) -> None:
    assert purpose_argument(tool, arguments) == declared


def test_an_allowed_purpose_binds_after_nfc_and_any_other_is_refused() -> None:
    assert bound_purpose(CALLER, "purpose:support-case") == "purpose:support-case"
    assert bound_purpose(CALLER, "purpose:cafe\u0301") == "purpose:caf\u00e9"
    assert bound_purpose(CALLER, "purpose:other") is None
    assert bound_purpose(CALLER, "purpose:\ud800") is None


@pytest.mark.parametrize("declared", [None, 7, ["purpose:support-case"]])
def test_an_absent_or_non_string_purpose_binds_the_first_one(declared: object) -> None:
    assert bound_purpose(CALLER, declared) == "purpose:support-case"
