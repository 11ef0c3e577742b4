"""Which decision inputs a call keeps for policy replay, and for how long (issue 22 item 4).

The operator sets the retention (ENGRAM_DECISION_INPUT_RETENTION_DAYS, default 90; 0 keeps
none). Each decision's input and result are kept beside its receipt (store/decision_inputs.py)
as the canonical JSON its receipt digests, and compaction forgets those older than the
retention (admin/compaction.py), so the rows and their freed bytes go together.
"""

from __future__ import annotations

from collections.abc import Iterable

from engram_memory.contract.canonical import canonical_text, normalize
from engram_memory.policy.receipts import Decision
from engram_memory.store.decision_inputs import KeptDecision

DEFAULT_RETENTION_DAYS = 90
MAX_RETENTION_DAYS = 36_500
DAY_MS = 86_400_000


def kept_decisions(decisions: Iterable[Decision], retention_days: int) -> tuple[KeptDecision, ...]:
    """The decisions of a call to keep (none when the retention is 0)."""
    if retention_days <= 0:
        return ()
    return tuple(
        KeptDecision(
            decision_id=d.receipt.decision_id,
            policy_path=d.receipt.policy_path,
            decided_at_ms=d.receipt.decided_at_ms,
            # As the receipt digested them (policy/decider.py), else serialized here.
            input_json=d.input_json or canonical_text(normalize(dict(d.policy_input))),
            result_json=d.result_json or canonical_text(normalize(dict(d.result))),
        )
        for d in decisions
    )


def prune_before_ms(now_ms: int, retention_days: int) -> int:
    """Kept decisions made before this instant are past the retention (0 days: every one)."""
    return now_ms - max(retention_days, 0) * DAY_MS + (1 if retention_days <= 0 else 0)
