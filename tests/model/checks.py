"""Checks shared by the rules: envelopes against predictions, ids, bodies, coverage counts."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from tests.model.model import Prediction
from tests.model.scopes import ADMIT, CAPTURE, FORGET, canonical, content_token

CANDIDATE_ID = re.compile(r"^candidate_[0-9a-f]{64}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
RECORD_ID = re.compile(r"^mem_[a-z2-7]{52}$")

# What the sequences exercised; `ENGRAM_MODEL_STATS=1 pytest -s` prints it.
OUTCOMES: Counter[str] = Counter()


def count(tool: str, prediction: Prediction) -> None:
    if prediction.code is not None:
        label = prediction.code
    elif prediction.replay is not None:
        label = "replay"
    else:
        outcome = prediction.fields.get("outcome", prediction.fields)
        label = str(outcome.get("status", "ok")) + prediction.note
    OUTCOMES[f"{tool.removeprefix('engram_memory_')}: {label}"] += 1


def matches(actual: Any, expected: Any, path: str = "") -> None:
    """`expected` is a partial view of `actual`: every key it names must be equal."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        for key, value in expected.items():
            assert key in actual, f"{path}/{key} missing"
            matches(actual[key], value, f"{path}/{key}")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def expect(
    envelope: dict[str, Any], prediction: Prediction, error_objects: dict[str, str]
) -> dict[str, Any] | None:
    """Check an envelope against a prediction; the output value of a success, else None.

    `error_objects` holds the first error object seen per code: every later one must be
    byte-identical (constant messages; a foreign target answers exactly like an unknown one).
    """
    assert envelope["redactionClass"] == "high"
    assert envelope["auditId"].startswith("audit:")
    if prediction.code is not None:
        assert set(envelope) == {"ok", "auditId", "redactionClass", "error"}, envelope
        assert envelope["ok"] is False, (prediction.code, envelope)
        assert envelope["error"]["code"] == prediction.code, (prediction.code, envelope)
        seen = error_objects.setdefault(prediction.code, canonical(envelope["error"]))
        assert canonical(envelope["error"]) == seen, (seen, envelope["error"])
        return None
    assert set(envelope) == {"ok", "auditId", "redactionClass", "output"}, envelope
    assert envelope["ok"] is True, (prediction, envelope)
    assert envelope["output"]["schema_version"] == 1
    value: dict[str, Any] = envelope["output"]["value"]
    if prediction.replay is not None:
        assert value == prediction.replay
    else:
        check_fields(value, prediction)
    return value


def check_fields(value: dict[str, Any], prediction: Prediction) -> None:
    """A fresh success: the predicted fields are there and equal, the absent ones absent."""
    matches(value, prediction.fields)
    for path in prediction.absent:
        inner: Any = value
        for part in path[:-1]:
            inner = inner[part]
        assert path[-1] not in inner, (path, value)


def check_new_ids(tool: str, value: dict[str, Any], seen_ids: set[str]) -> None:
    """Shapes of a fresh success; ids are never reused, across calls and across tenants."""
    new: str | None = None
    if tool == FORGET:
        # `complete` comes with its coverage receipt, and only then (SPEC §4.6).
        assert DIGEST.match(value["coverage_receipt_digest"]), value
    if tool == CAPTURE:
        new = value["candidate_id"]
        assert CANDIDATE_ID.match(new), new
        assert DIGEST.match(value["record_digest"])
    elif tool == ADMIT and value["outcome"]["status"] == "accepted":
        new = value["outcome"]["record_id"]
        assert RECORD_ID.match(new), new
    if new is not None:
        assert new not in seen_ids, new
        seen_ids.add(new)


def check_body(record: dict[str, Any], scope_ref: str, word: str, content: int) -> None:
    """The body opened is this record's: its scope is the caller's, its text holds the
    sequence's word and the record's own content token."""
    assert record["scope_ref"] == scope_ref
    words = record["components"][0]["text"].split()
    assert word in words, words
    assert content_token(word, content) in words, words
