"""`policy diff` asks the policy with inputs it builds itself (policy/decision_corpus.py); they
must have exactly the shape the service sends, or a diff would compare answers to questions
the service never asks. The service's shapes come from the decider itself, through
`policy/calls.plan_call` (the same recorder `policy explain` uses)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path

from engram_memory.policy.authoring.calls import (
    parse_binding,
    parse_call,
    plan_call,
    workspace_classifiers,
)
from engram_memory.policy.authoring.data_compiler import compile_policies
from engram_memory.policy.authoring.decision_corpus import generate_calls

POLICIES = Path(__file__).resolve().parents[2] / "policies"
BINDING = {
    "tenant": "acme",
    "workspace": "support",
    "principal": "user:bob",
    "purpose": "purpose:support-case",
    "groups": ["group:support-advisors"],
}
TOOLS = [
    "engram_memory_search",
    "engram_memory_get",
    "engram_memory_capture",
    "engram_memory_request_admission",
    "engram_memory_withdraw",
    "engram_memory_forget",
]


def _service_shapes() -> dict[str, set[frozenset[str]]]:
    """Per domain, the input key sets the service sends (with and without groups, in a
    workspace without content classifiers and in one with them)."""
    shapes: dict[str, set[frozenset[str]]] = defaultdict(set)
    compiled = compile_policies(POLICIES)
    for groups, workspace in itertools.product((True, False), ("support", "accounts")):
        binding = {k: v for k, v in BINDING.items() if groups or k != "groups"}
        parsed = parse_binding({**binding, "workspace": workspace})
        classifiers = workspace_classifiers(compiled, parsed)
        calls = [{"tool": tool} for tool in TOOLS]
        calls += [{"tool": "engram_memory_capture", "expires_at": "2026-02-01T00:00:00.000Z"}]
        for call in calls:
            for query in plan_call(parsed, parse_call(call), classifiers):
                shapes[query.domain].add(frozenset(query.input))
    maintenance = {"tool": "maintenance", "operator": "human:dana", "authority": "maintain"}
    for query in plan_call(parse_binding(BINDING), parse_call(maintenance)):
        shapes[query.domain].add(frozenset(query.input))
    return shapes


def test_every_corpus_input_has_a_shape_the_service_sends() -> None:
    service = _service_shapes()
    corpus = generate_calls(compile_policies(POLICIES))
    assert {call.domain for call in corpus} == set(service)
    strays = {
        (call.domain, tuple(sorted(call.policy_input)))
        for call in corpus
        if frozenset(call.policy_input) not in service[call.domain]
    }
    assert strays == set()
