"""Content classifiers in the service (issue 22 item 1): in-process, a capture in the shipped
acme/accounts workspace is held when its text names a customer, the audit and answers carry
no text; a bundle whose classifier the service cannot run fails closed."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.runtime import Services
from engram_memory.policy.decider import DISCOVERY_PATH, PolicyDecider
from engram_memory.policy.engine import EngineAnswer
from tests.harness import Caller
from tests.tools.test_tool_rules import admit, capture, code, high_water, value


def _accounts(alice: Caller) -> Caller:
    return replace(alice, workspace="accounts")


def test_a_customer_mention_is_held_and_plain_text_accepted(alice: Caller) -> None:
    caller = _accounts(alice)
    held = value(admit(caller, capture(caller, "The client asked to close it.")["candidate_id"]))
    plain = value(admit(caller, capture(caller, "The parcel left the depot.")["candidate_id"]))
    assert held["outcome"]["status"] == "pending_adjudication"
    assert plain["outcome"]["status"] == "accepted"


def test_the_support_workspace_sends_no_classifier_names(alice: Caller) -> None:
    # No classifiers defined there: "customer" in the text changes nothing.
    outcome = value(admit(alice, capture(alice, "The customer called.")["candidate_id"]))
    assert outcome["outcome"]["status"] == "accepted"


class _BrokenClassifierEngine:
    """Answers like the real engine, but discovery hands over a classifier the service
    cannot run (a bundle `policy build` would have refused)."""

    def __init__(self, real: Any, broken: dict[str, Any]) -> None:
        self.real = real
        self.broken = broken
        self.engine_id = real.engine_id
        self.engine_version = real.engine_version

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        answer = self.real.evaluate(path, policy_input)
        if path == DISCOVERY_PATH and isinstance(answer.result, Mapping):
            return EngineAnswer({**answer.result, "classifiers": [self.broken]}, answer.revision)
        return answer

    def close(self) -> None:
        return None


def test_a_classifier_the_service_cannot_run_is_policy_unavailable_and_writes_nothing(
    alice: Caller, services: Services, engine: Any
) -> None:
    caller = _accounts(alice)
    real = services.decider
    for broken in (
        {"name": "x", "regex": "(a+)+"},
        {"name": "x", "detector": "passport"},
        {"name": "x", "terms": ["a"], "regex": "a"},
    ):
        services.decider = PolicyDecider(
            _BrokenClassifierEngine(engine, broken), real.expected, services.clock_ms
        )
        arguments = demo_capture_arguments("The customer called.", uuid.uuid4().hex * 2)
        assert code(caller.call("engram_memory_capture", arguments)) == "POLICY_UNAVAILABLE"
    assert high_water(services) == 0
