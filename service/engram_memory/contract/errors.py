"""The one place that names every failure an agent can see (SPEC §1.7, §5).

Tool errors travel inside the result envelope; protocol errors are JSON-RPC errors with a
constant message and no data. Both carry only constants: a message is never interpolated or
derived from input, exceptions or stored content, so nothing sensitive can leak through it.
The exceptions that carry these codes, and every other, are in contract/exceptions.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class _CodeSpec:
    retriable: bool
    message: str


class ErrorCode(Enum):
    """Envelope error codes with their fixed `retriable` flag and constant message (SPEC §5)."""

    INVALID_SCHEMA = _CodeSpec(False, "Arguments do not satisfy the tool input contract.")
    INVALID_DIGEST = _CodeSpec(False, "A digest argument is malformed.")
    UNAUTHORIZED = _CodeSpec(False, "The operation is not authorized.")
    AUTHORIZATION_EXPIRED = _CodeSpec(False, "The authorization has expired.")
    AUTHORIZATION_REVOKED = _CodeSpec(False, "The authorization has been revoked.")
    NOT_FOUND = _CodeSpec(False, "The target is not available.")
    DIGEST_CONFLICT = _CodeSpec(False, "The idempotency key is bound to a different operation.")
    ILLEGAL_TRANSITION = _CodeSpec(False, "The lifecycle state does not permit this operation.")
    ALREADY_TERMINAL = _CodeSpec(False, "The target is in a terminal state.")
    MUTATION_OUTCOME_UNKNOWN = _CodeSpec(True, "The mutation outcome is unknown.")
    gate_failed = _CodeSpec(False, "Host confirmation or policy gate not satisfied.")
    STALE_PAGE = _CodeSpec(False, "The page cursor is no longer valid.")
    RESULT_TOO_LARGE = _CodeSpec(False, "The result exceeds the response size limit.")
    PROJECTION_OVERSIZED = _CodeSpec(False, "A record does not fit in the packet budget.")
    RATE_LIMITED = _CodeSpec(True, "Rate limit exceeded.")
    DEADLINE_EXCEEDED = _CodeSpec(True, "The deadline elapsed before completion.")
    CANCELLED = _CodeSpec(True, "The call was cancelled.")
    STORE_UNAVAILABLE = _CodeSpec(True, "The memory store is unavailable.")
    FENCE_LOST = _CodeSpec(True, "The store writer fence was lost.")
    CURSOR_GAP = _CodeSpec(True, "The journal is temporarily inconsistent.")
    POLICY_UNAVAILABLE = _CodeSpec(True, "The policy service is unavailable.")
    POLICY_STALE = _CodeSpec(True, "The policy decision is stale.")
    PROJECTION_STALE = _CodeSpec(True, "A derived projection is stale.")
    RANKING_UNAVAILABLE = _CodeSpec(True, "The required ranking channel is unavailable.")
    CAPABILITY_UNAVAILABLE = _CodeSpec(False, "A required capability is unavailable.")
    JOURNAL_CORRUPT = _CodeSpec(False, "Journal integrity check failed.")
    BLOB_MISSING = _CodeSpec(False, "A stored record body is missing.")
    REGISTRY_VERSION_UNAVAILABLE = _CodeSpec(False, "A required registry version is unavailable.")
    BACKUP_INVALID = _CodeSpec(False, "Backup validation failed.")
    RESTORE_REFUSED = _CodeSpec(False, "Restore was refused.")
    MIGRATION_LEDGER_INVALID = _CodeSpec(False, "Migration ledger validation failed.")

    @property
    def retriable(self) -> bool:
        return self.value.retriable

    @property
    def message(self) -> str:
        return self.value.message


class ProtocolCode(Enum):
    """JSON-RPC refusals (SPEC §1.7): constant message, no data, never an envelope."""

    UNKNOWN_TOOL = (-32602, "Unknown tool")
    CONTEXT_UNAVAILABLE = (-32603, "Trusted invocation context unavailable")
    # tools/list in a policy outage: retriable (JSON-RPC's implementation-defined server
    # error range), unlike the two "stop, never retry" codes above; SPEC §2 forbids an
    # empty list for it.
    POLICY_UNAVAILABLE = (-32000, "The policy service is unavailable.")

    @property
    def rpc_code(self) -> int:
        return self.value[0]

    @property
    def message(self) -> str:
        return self.value[1]


# JSON-RPC 2.0's own messages for its reserved codes, and the SDK's constant ones that carry
# nothing of the request; any other message on the wire is replaced (`wire_error_message`).
_STANDARD_RPC_MESSAGES = {
    -32700: "Parse error",
    -32600: "Invalid Request",
    -32601: "Method not found",
    -32602: "Invalid params",
    -32603: "Internal error",
}
_CONSTANT_RPC_ERRORS = frozenset(
    {*((code.rpc_code, code.message) for code in ProtocolCode), *_STANDARD_RPC_MESSAGES.items()}
    | {(-32000, "Connection closed"), (-32800, "Request cancelled")}
)


def wire_error_message(code: int, message: str) -> str:
    """The message a JSON-RPC error with `code` may carry: `message` if it is one of the
    known constants for that code, else the constant for the code (never request data: the
    SDK interpolates method names, parser and validation text into some of its own)."""
    if (code, message) in _CONSTANT_RPC_ERRORS:
        return message
    return _STANDARD_RPC_MESSAGES.get(code, "Server error")
