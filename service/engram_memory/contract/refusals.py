"""Refusals before a binding exists: why (the fixed vocabulary) and what the audit records.

A call refused before its invocation context verified (no token, a forged or expired one,
a replayed one, an unknown tool, a request the transport or the JSON gate refused, a
maintenance-channel refusal) has no tenant to be attributed to; DESIGN "Audit" sends it to
a host-level stream in the same hash chain, with what is known: the transport, the peer, the
method, a reason from the fixed vocabulary below, and the digest of the token if one came.
Nothing the client wrote is stored verbatim (method names and tool names outside the known
ones are recorded as `other`), so the stream cannot be used to plant content.
`MemoryService.refused_before_binding` hands a `PreBindingRefusal` to
core/refusal_stream.py, which records it.


These shapes are shared by the server's host-level audit stream and the transports (the JSON
gate and the HTTP guard), which the signing gateway also runs at its door; they live in
`contract` so that the transports and the gateway, which may not import `core`, judge
requests with the same gate and name their refusals with the same words.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class PreBindingRefusal:
    """One refusal before binding, as the transport saw it.

    `peer` is the client address for HTTP (`ip`, no port) or `stdio`; `method` is the
    JSON-RPC method when it is one of the protocol's, else `other`; `token` is the raw
    invocation token if one came (only its digest is recorded); `tool` is the tool a
    `tools/call` named, recorded only when it is one of the six (else the method is).
    """

    transport: str  # "stdio" | "http" | "maintenance"
    peer: str
    method: str
    reason: RefusalReason
    token: object = None
    tool: str = ""
