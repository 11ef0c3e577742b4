"""A decider for the import's workers that remembers, per chunk of lines, what it decided.

Most of a line's decisions depend only on the binding (discovery, confirmation,
authorization, reconciliation: the same tenant, workspace, principal, purpose and tool
every line) and are asked again, input for input, on every line. The engine already
remembers its answers (policy/embedded.py), but each call still re-reads the answer,
re-validates it and digests the input and the result again for the receipt. Here the second
and later asks of the very same input within a chunk get the first decision's result with a
receipt of their own: a new decision id and time, and the first receipt's input and result
digests, which cover exactly the same bytes. Every decision still has its receipt, and every
receipt still verifies (its digest is derived from its own body).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any, TypeVar

from engram_memory.contract.receipts import DecisionReceipt, receipt_digest_of
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.receipts import Decision
from engram_memory.policy.result_shapes import ResultShape

_R = TypeVar("_R", bound=ResultShape)


def reissued(receipt: DecisionReceipt, decided_at_ms: int) -> DecisionReceipt:
    """A receipt of its own for the same decision made again: new id (formed as
    policy/receipts.py forms it) and time, same digests of input and result."""
    body = receipt.body()
    body["decision_id"] = decision_id = "dec_" + uuid.uuid4().hex
    body["decided_at_ms"] = decided_at_ms
    return replace(
        receipt,
        decision_id=decision_id,
        decided_at_ms=decided_at_ms,
        receipt_digest=receipt_digest_of(body),
    )


class ChunkDecisions(PolicyDecider):
    """`PolicyDecider` answering a repeated input from its first decision until `forget`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._decided: dict[tuple[str, str], tuple[Any, Decision]] = {}

    def forget(self) -> None:
        """Start a new chunk: nothing is remembered across chunks (bounded memory)."""
        self._decided.clear()

    def _decide(
        self, path: str, policy_input: dict[str, Any], model: type[_R]
    ) -> tuple[_R, Decision]:
        try:
            key = (path, json.dumps(policy_input, sort_keys=True, separators=(",", ":")))
        except (TypeError, ValueError):  # not JSON: the engine refuses it, as always
            return super()._decide(path, policy_input, model)
        remembered = self._decided.get(key)
        if remembered is None or not isinstance(remembered[0], model):
            parsed, decision = super()._decide(path, policy_input, model)
            self._decided[key] = (parsed, decision)
            return parsed, decision
        parsed, first = remembered
        receipt = reissued(first.receipt, self._clock_ms())
        return parsed, replace(first, receipt=receipt, policy_input=policy_input)
