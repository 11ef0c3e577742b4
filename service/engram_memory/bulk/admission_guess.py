"""The admission decision of an imported line, asked in a worker at a guessed cursor.

The admission policy's input names the candidate's record digest, and the record binds the
cursor its capture event lands at (core/records.py): the decision cannot be asked before
the line's place in the journal is known, which only the import process (bulk/importer.py)
knows, in line order. Asked there, it was a quarter of that process's CPU, the bound of the
whole import. But the cursor is predictable: the import is the scope's only writer, and a
line whose capture is written and whose candidate is accepted or rejected moves the
journal's head by exactly two (the capture event and the admission's). So the importer
hands each chunk the cursor its first line's capture would take if every line before it
went that way, from the head it has reached (`Importer._guess`), and the worker
(`guessed`) builds the record at that cursor, as the capture will, and asks the policy about
it, with the admission context, decider and inputs it would be asked with in the importer.

The importer uses the guess only when it holds (`verified`): the capture event landed at
the guessed cursor, so the record is the one built there (the same function of the same
plan, instant and cursor), the decision is bound to its digest, and the decision is still
within its freshness window by the importer's own clock. Otherwise it asks the policy
itself, as before; a wrong guess costs a decision made twice, never a different one. The
receipt of a guess the importer does not use is never written anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.exceptions import ProtocolRefusal, ToolError
from engram_memory.core.runtime import CallContext
from engram_memory.crypto.sealing import new_data_key, seal
from engram_memory.policy.decider import ADMISSION_MAX_AGE_MS, AdmissionResult, ClassifierFacts
from engram_memory.tools import admission, capture

# Journal events of a line whose capture is written and whose admission accepts or rejects
# (an admission held for adjudication writes none; a refused capture writes nothing).
EVENTS_PER_LINE = 2


class CursorGuesses:
    """The capture cursors the importer hands out with the chunks (`LinePool.prepared`),
    from the journal's head after the last line it placed."""

    def __init__(self) -> None:
        self.head = 0  # the journal's head after the last line placed
        self._placed = 0  # lines placed so far

    def placed(self, head: int) -> None:
        """One more line placed; the journal's head is now `head`."""
        self.head = head
        self._placed += 1

    def guess(self, ordinal: int) -> int:
        """The cursor the capture of the line with `ordinal` lines before it takes if every
        line from the next one to be placed until it writes both its events."""
        return self.head + EVENTS_PER_LINE * (ordinal - self._placed) + 1


@dataclass(frozen=True)
class GuessedAdmission:
    """The record at the guessed capture `cursor`, and the policy's result about it."""

    cursor: int
    record: dict[str, JsonValue]
    result: AdmissionResult
    decision: dict[str, JsonValue]  # the result's decision object (admission.decision_object)
    # When the policy accepts: the record sealed under a new key of its own, (key, sealed),
    # as the importer seals an accepted record (its id binds the cursor too).
    sealed: tuple[bytes, bytes] | None

    @property
    def events(self) -> int:
        """The journal events the line writes if the guess holds (for the next line's)."""
        return 1 if self.result.decision == "adjudication_required" else EVENTS_PER_LINE


def guessed(
    ctx: CallContext,
    planned: capture.CapturePlan,
    envelope: dict[str, JsonValue],
    cursor: int,
    facts: ClassifierFacts | None,
) -> GuessedAdmission | None:
    """The admission decision, asked in the line's admission context `ctx`, about
    `planned`'s candidate if its capture lands at `cursor`; None when the policy refuses to
    answer (the importer then asks, and refuses the line as the tool would).

    The record is built with `ctx`'s instant: both of a line's calls carry the line's."""
    record = capture.record_at(ctx, planned, cursor)
    candidate = admission.admission_candidate(
        planned.candidate_id, str(record["payload_digest"]), str(record["record_digest"]), envelope
    )
    try:
        result = ctx.services.decider.admission(ctx.subject, candidate, ctx.now_ms, facts)
    except (ToolError, ProtocolRefusal):
        return None
    sealed = _sealed(ctx, record) if result.decision == "accept" else None
    return GuessedAdmission(cursor, record, result, admission.decision_object(result), sealed)


def sealed_record(
    ctx: CallContext, guess: GuessedAdmission | None, record: dict[str, JsonValue]
) -> tuple[bytes, bytes]:
    """`record` sealed under a new key, (key, sealed body): by the worker that guessed the
    cursor it binds, if that worker sealed this very record, else now."""
    if guess is None or guess.sealed is None:
        return _sealed(ctx, record)
    same = guess.record["record_digest"] == record["record_digest"]
    return guess.sealed if same else _sealed(ctx, record)


def _sealed(ctx: CallContext, record: dict[str, JsonValue]) -> tuple[bytes, bytes]:
    key = new_data_key()
    return key, seal(key, canonical_json(dict(record)), ctx.scope_ref, str(record["record_id"]))


def verified(
    guess: GuessedAdmission | None, record: dict[str, JsonValue], clock_ms: Callable[[], int]
) -> GuessedAdmission | None:
    """The guess, if its result is the one the importer would get for `record` (the record
    its capture wrote) now: None to ask the policy again."""
    if guess is None or guess.record["record_digest"] != record["record_digest"]:
        return None
    result = guess.result
    if result.record_digest != record["record_digest"]:  # as the decider checks it
        return None
    now = clock_ms()
    # The decider's freshness window, by this process's clock (the worker's was the
    # chunk's instant): outside it, asking again yields what the tool would have.
    if result.issued_at_ms > now or now - result.issued_at_ms > ADMISSION_MAX_AGE_MS:
        return None
    return guess
