"""Refusals before a binding exists: what the host-level audit stream records about them.

A call refused before its invocation context verified (no token, a forged or expired one,
a replayed one, an unknown tool, a request the transport or the JSON gate refused, a
maintenance-channel refusal) has no tenant to be attributed to; DESIGN "Audit" sends it to
a host-level stream in the same hash chain, with what is known: the transport, the peer, the
method, a reason from the fixed vocabulary below, and the digest of the token if one came.
Nothing the client wrote is stored verbatim (method names and tool names outside the known
ones are recorded as `other`), so the stream cannot be used to plant content.

This module defines the value handed to the stream; `tools/dispatch.py`
(`MemoryService.refused_before_binding`) hands it to core/refusal_stream.py, which records it.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram_memory.contract.refusals import RefusalReason

__all__ = ["PreBindingRefusal", "RefusalReason"]


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
