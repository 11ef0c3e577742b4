"""Known failures of the layers below the tools, and the contract code each one means.

Agent calls (tools/dispatch.py) and host maintenance (admin/maintenance.py) map them the same
way, so an operator sees the code an agent would. Unknown exceptions are not mapped here: the
caller decides between MUTATION_OUTCOME_UNKNOWN and CAPABILITY_UNAVAILABLE (SPEC §5).
"""

from __future__ import annotations

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    CommitOutcomeUnknown,
    JournalCorrupt,
    JournalIntentConflict,
    KeyStoreUnavailable,
    SealBroken,
    StoreCorrupt,
    StoreUnavailable,
    ToolError,
)

# First match wins: StoreCorrupt and CommitOutcomeUnknown are StoreUnavailable, and must stay
# "damaged" (never retriable: SPEC's non-retriable store-integrity code) and "unknown".
_KNOWN_FAILURES: tuple[tuple[type[Exception], ErrorCode, str], ...] = (
    (StoreCorrupt, ErrorCode.JOURNAL_CORRUPT, "store file damaged"),
    (JournalIntentConflict, ErrorCode.DIGEST_CONFLICT, "journal intent conflict"),
    (JournalCorrupt, ErrorCode.JOURNAL_CORRUPT, "journal corrupt"),
    (SealBroken, ErrorCode.BLOB_MISSING, "sealed body does not open"),
    (CommitOutcomeUnknown, ErrorCode.MUTATION_OUTCOME_UNKNOWN, "commit outcome unknown"),
    # Rolled back before COMMIT: definitely nothing written.
    (StoreUnavailable, ErrorCode.STORE_UNAVAILABLE, "store failure"),
    (KeyStoreUnavailable, ErrorCode.STORE_UNAVAILABLE, "key store failure"),
)


def known_failure(exc: Exception) -> ToolError | None:
    """The ToolError a known lower-layer failure maps to (constant detail), else None."""
    for kind, code, detail in _KNOWN_FAILURES:
        if isinstance(exc, kind):
            return ToolError(code, detail)
    return None
