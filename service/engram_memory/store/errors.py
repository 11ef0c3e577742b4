"""The store's failures, one class per contract meaning (the call path maps them to codes in
core/failures.py). `Database` raises them; every store module may."""

from __future__ import annotations

from engram_memory.contract.errors import EngramError
from engram_memory.store.driver_errors import OpenFailure


class StoreUnavailable(EngramError):
    """The store could not complete an operation; maps to STORE_UNAVAILABLE."""


class CommitOutcomeUnknown(StoreUnavailable):
    """COMMIT itself failed: the transaction may or may not be durable (MUTATION_OUTCOME_UNKNOWN).

    Any failure before COMMIT rolls back and is a definite STORE_UNAVAILABLE instead.
    """


class StoreCorrupt(StoreUnavailable):
    """The store file is damaged (checksum, header or fatal I/O error): JOURNAL_CORRUPT.

    Not retriable. It is a `StoreUnavailable` so that every handler of store failures sees
    it, but callers that pick a contract code must test for it first.
    """


class StoreOpenFailed(StoreUnavailable):
    """The store file could not be opened; `line` says why in one operator line."""

    def __init__(self, failure: OpenFailure, line: str) -> None:
        super().__init__(line)
        self.failure = failure
        self.line = line
