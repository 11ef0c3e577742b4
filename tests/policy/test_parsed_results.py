"""A result the engine answered before is parsed and serialized once; nothing else is reused."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import ValidationError

from engram_memory.contract.canonical import canonical_json, normalize
from engram_memory.contract.receipts import result_digest_of
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR
from engram_memory.policy.decider import PolicyDecider, Subject
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.parsed_results import ParsedResults
from engram_memory.policy.result_shapes import AllowShape

PATH = "engram/reconciliation/decision"


class CountingValidate:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, result: Mapping[str, Any]) -> AllowShape:
        self.calls += 1
        return AllowShape.model_validate(result)


def _derive(
    memo: ParsedResults, result: dict[str, Any], text: str | None, validate: CountingValidate
) -> tuple[AllowShape, bytes]:
    return memo.derive(PATH, AllowShape, result, text, validate)


def test_the_same_answer_text_is_parsed_once_and_serialized_as_rfc8785() -> None:
    memo, validate = ParsedResults(), CountingValidate()
    result = {"allow": True, "reasons": ["consented"]}
    text = json.dumps(result)
    first = _derive(memo, result, text, validate)
    second = _derive(memo, json.loads(text), text, validate)
    assert validate.calls == 1
    assert first == second
    assert first[1] == canonical_json(normalize(result))


def test_an_answer_without_a_text_is_never_remembered() -> None:
    memo, validate = ParsedResults(), CountingValidate()
    result = {"allow": False, "reasons": ["r"]}
    _derive(memo, result, None, validate)
    _derive(memo, result, None, validate)
    assert validate.calls == 2
    assert len(memo) == 0


def test_different_answers_do_not_share_what_was_derived() -> None:
    memo, validate = ParsedResults(), CountingValidate()
    allowed = _derive(memo, {"allow": True, "reasons": ["r"]}, '{"allow":true}', validate)
    refused = _derive(memo, {"allow": False, "reasons": ["r"]}, '{"allow":false}', validate)
    assert allowed[0].allow
    assert not refused[0].allow
    assert allowed[1] != refused[1]


def test_a_result_that_does_not_parse_is_refused_every_time_and_not_remembered() -> None:
    memo, validate = ParsedResults(), CountingValidate()
    for _ in range(2):
        with pytest.raises(ValidationError):
            _derive(memo, {"allow": "yes"}, '{"allow":"yes"}', validate)
    assert validate.calls == 2
    assert len(memo) == 0


def test_the_memo_stays_within_its_bound() -> None:
    memo, validate = ParsedResults(entries=2), CountingValidate()
    for n in range(5):
        _derive(memo, {"allow": True, "reasons": [f"r{n}"]}, f"text-{n}", validate)
    assert len(memo) <= 2


def test_decisions_from_a_remembered_answer_carry_the_digests_a_fresh_one_does() -> None:
    remembering = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR)
    fresh = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR, memo_entries=0)
    subject = Subject("acme", "support", "user:alice", "agent:x", "purpose:p", "host:h")
    try:
        deciders = [PolicyDecider(e, e.identity, lambda: 1) for e in (remembering, fresh)]
        first, again, baseline = (
            deciders[0].authz(subject, "engram_memory_get"),
            deciders[0].authz(subject, "engram_memory_get"),
            deciders[1].authz(subject, "engram_memory_get"),
        )
        for answer in (first, again):
            receipt = answer.decision.receipt
            assert receipt.result_digest == baseline.decision.receipt.result_digest
            assert receipt.input_digest == baseline.decision.receipt.input_digest
            assert receipt.result_digest == result_digest_of(normalize(answer.decision.result))
            assert answer.decision.result_json == baseline.decision.result_json
            assert answer.allow == baseline.allow
            assert answer.redaction == baseline.redaction
    finally:
        remembering.close()
        fresh.close()
