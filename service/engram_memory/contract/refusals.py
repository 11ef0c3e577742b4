"""Why a request was refused before binding: the fixed vocabulary the audits record.

A shape shared by the server's host-level audit stream (core/host_audit.py, which
re-exports it) and the transports' JSON gate (json_gate.py), which the signing gateway also
runs at its door; it lives in `contract` so that the gateway, which may not import `core`,
judges requests with the same gate and names its refusals with the same words.
"""

from __future__ import annotations

from enum import Enum


class RefusalReason(Enum):
    """Why a request was refused before binding; the value is what the audit records."""

    TOKEN_MISSING = "token_missing"  # noqa: S105 - a reason name, not a secret
    TOKEN_INVALID = "token_invalid"  # noqa: S105 - malformed, unsigned, untrusted key, bad shape
    TOKEN_EXPIRED = "token_expired"  # noqa: S105
    TOKEN_REPLAYED = "token_replayed"  # noqa: S105
    UNKNOWN_TOOL = "unknown_tool"
    METHOD_NOT_FOUND = "method_not_found"
    PARSE_ERROR = "parse_error"  # not UTF-8, lone surrogate, not JSON, nested too deep
    INVALID_REQUEST = "invalid_request"  # JSON, but not a request the protocol accepts
    DUPLICATE_KEYS = "duplicate_keys"  # outside a tool call's arguments
    REQUEST_TOO_LARGE = "request_too_large"
    SESSION_WITHOUT_CONTEXT = "session_without_context"
    SESSION_LIMIT = "session_limit"
    MAINTENANCE_REFUSED = "maintenance_refused"
