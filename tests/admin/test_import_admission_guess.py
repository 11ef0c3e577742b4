"""The import's admission decisions asked in its workers at a guessed cursor
(bulk/admission_guess.py): used when the capture lands there, asked again by the import
process when it does not, and the store left the same either way.

The guess fails for every line after one that writes fewer events than a captured and
admitted line (a replay writes none): the second run below loads new lines behind replayed
ones, so its first guesses miss. The import process's own admission decisions are counted
by wrapping its decider's `admission` (the workers are spawned: they keep theirs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.maintenance import Operator
from engram_memory.admin.verification import verify_store
from engram_memory.bulk.importer import ImportBinding
from engram_memory.cli.bulk_import import import_file
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.crypto.keys import RootKey
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from tests.admin.test_import import FROZEN_MS, PURPOSE, ROOT, SESSION, _services, _state

BINDING = ImportBinding("acme", "support", "user:alice", PURPOSE, SESSION)
WHO = Operator("acme", "support", "human:dana")


def _line(n: int, evidence_ref: str = "evidence:ticket/T-1") -> str:
    arguments = demo_capture_arguments(
        f"Refund {n} approved for order {4700 + n}.",
        f"admission-guess-{n:04d}",
        evidence_ref=evidence_ref,
    )
    arguments["payload"]["valid_time"] = {"t": FROZEN_MS - 60_000}
    arguments["payload"]["primary_event"]["at"] = FROZEN_MS - 60_000
    return json.dumps(arguments)


# A held line (one event, which the worker knows from its guessed decision) among accepted
# ones; the second file repeats the first (replays: no events) before new lines.
FIRST = [_line(0), _line(1), _line(2, "evidence:other/y"), _line(3), _line(4)]
SECOND = [*FIRST, _line(5), _line(6), _line(7, "evidence:untrusted/x"), _line(8)]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The candidate ids this process's deciders asked the admission policy about."""
    candidates: list[str] = []
    original = PolicyDecider.admission

    def counted(self: PolicyDecider, subject: Any, candidate: Any, *args: Any) -> Any:
        candidates.append(candidate.candidate_id)
        return original(self, subject, candidate, *args)

    monkeypatch.setattr(PolicyDecider, "admission", counted)
    return candidates


def _load(data_dir: Path, engine: EmbeddedWasmEngine, lines: list[str], workers: int) -> Any:
    source = data_dir.parent / f"{data_dir.name}-{len(lines)}.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    services = _services(data_dir, engine, RootKey(ROOT))
    try:
        return import_file(services, WHO, BINDING, source, batch=4, workers=workers)
    finally:
        services.database.close()


def test_guessed_admissions_leave_the_store_one_process_leaves(
    tmp_path: Path, engine: EmbeddedWasmEngine, asked: list[str]
) -> None:
    alone, pooled = tmp_path / "alone", tmp_path / "pooled"
    _load(alone, engine, FIRST, workers=1)
    assert len(asked) == len(FIRST)  # one process: it decides every admission itself
    asked.clear()
    summary = _load(pooled, engine, FIRST, workers=2)
    assert summary == {"lines": 5, "accepted": 4, "pending_adjudication": 1}
    assert asked == []  # every guess held, the held line's included
    assert _state(pooled) == _state(alone)

    asked.clear()
    _load(alone, engine, SECOND, workers=1)
    asked.clear()
    summary = _load(pooled, engine, SECOND, workers=2)
    assert summary == {"lines": 9, "accepted": 3, "rejected": 1, "replayed": 5}
    # Behind the replays every guess was two cursors a line too far: asked again here.
    assert len(asked) == 4
    assert _state(pooled) == _state(alone)
    assert verify_store(pooled, None).events == verify_store(alone, None).events
