"""What the human is shown of a confirmation's target: the record as the approver may see it
under policy, never more (issue 23, finding 5: "the human confirms blind").

The gateway holds no store state and makes no policy decision, so it asks the store: an
`engram_memory_get` of the target record, minted for the caller (the principal the approving
human acts as, in both modes: the local user's binding, or the bearer token's subject) and
the call's purpose. The store applies that principal's redaction allowlist for that purpose
(SPEC §4.1) and answers the redacted record, or `NOT_FOUND` when policy lets them see
nothing of it (unknown, foreign or ineligible: indistinguishable, as everywhere). From the
redacted record only what it holds is summarised: the primary component's kind and text
(quoted, control characters replaced, cut at `TEXT_CHARS`), how many more components it has,
when it was recorded, and which fields policy withheld. A store that does not answer is said
so, and nothing of the record is shown.

Candidates (withdraw, request_admission) cannot be read by any tool before admission, and a
capture's payload is not stored yet: the prompt says nothing of their content can be shown.
The read is an ordinary `get`: the store audits it as the caller's read.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from engram_memory.contract.exceptions import UpstreamUnavailable
from engram_memory.contract.types import ToolName
from engram_memory.gateway.caller import Caller
from engram_memory.gateway.minting import InvocationMinter
from engram_memory.gateway.upstream import Upstream
from engram_memory.host.context import INVOCATION_META_KEY

TEXT_CHARS = 240
NOTHING_VISIBLE = "Policy lets you see nothing of it."
ONLY_ITS_ID = "Policy lets you see nothing of it beyond its id."
UNREADABLE = "It could not be read for this question (the store did not answer): nothing is shown."
CANDIDATE = (
    "A pending candidate: no one may read a candidate before admission, so nothing of it is shown."
)
CAPTURE = "A new memory from this call's payload; it is not stored yet, so nothing of it is shown."
_FIELD_CHARS = 64


async def target_preview(
    upstream: Upstream, minter: InvocationMinter, caller: Caller, purpose: str, target: str
) -> str:
    """One or two sentences on `target` as the caller may see it under policy for `purpose`."""
    if target.startswith("candidate_"):
        return CANDIDATE
    if not target.startswith("mem_"):
        return CAPTURE
    meta = {INVOCATION_META_KEY: minter.mint(caller, purpose)}
    arguments = {"record_id": target, "purpose_ref": purpose}
    try:
        result = await upstream.call_tool(ToolName.GET, arguments, meta)
    except UpstreamUnavailable:
        return UNREADABLE
    envelope = result.structured_content
    if not isinstance(envelope, Mapping):
        return UNREADABLE
    if envelope.get("ok") is not True:
        error = envelope.get("error")
        code = error.get("code") if isinstance(error, Mapping) else None
        return NOTHING_VISIBLE if code == "NOT_FOUND" else UNREADABLE
    output = envelope.get("output")
    value = output.get("value") if isinstance(output, Mapping) else None
    if not isinstance(value, Mapping) or not isinstance(value.get("record"), Mapping):
        return UNREADABLE
    withheld = value.get("redacted_fields")
    return record_summary(value["record"], withheld if isinstance(withheld, list) else [])


def record_summary(record: Mapping[str, Any], withheld: list[object]) -> str:
    """The summary of a redacted record: only what it holds."""
    parts: list[str] = []
    components = record.get("components")
    if isinstance(components, list) and components:
        primary_id = record.get("primary_component_id")
        primary = next(
            (
                c
                for c in components
                if isinstance(c, Mapping) and c.get("component_id") == primary_id
            ),
            components[0],
        )
        if isinstance(primary, Mapping) and isinstance(primary.get("text"), str):
            kind = _plain(str(primary.get("kind", "")), _FIELD_CHARS)
            parts.append(f'Its {kind} reads: "{_plain(primary["text"], TEXT_CHARS)}"')
        if len(components) > 1:
            parts.append(f"({len(components) - 1} more component(s))")
    recorded_at = record.get("recorded_at")
    if isinstance(recorded_at, str):
        parts.append(f"Recorded {_plain(recorded_at, _FIELD_CHARS)}.")
    if not parts:
        return ONLY_ITS_ID
    fields = [_plain(f, _FIELD_CHARS) for f in withheld if isinstance(f, str)]
    if fields:
        parts.append(f"Withheld from you by policy: {', '.join(fields)}.")
    return " ".join(parts)


def _plain(text: str, limit: int) -> str:
    """`text` on one line: control, format and separator characters become spaces (a
    record's text cannot draw on the prompt), cut at `limit` characters."""
    cleaned = "".join(
        " " if unicodedata.category(ch)[0] in "CZ" and ch != " " else ch for ch in text
    )
    flat = " ".join(cleaned.split()).replace('"', "'")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
