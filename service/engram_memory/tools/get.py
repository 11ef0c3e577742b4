"""`engram_memory_get`: read one eligible record, redacted, with a read receipt (SPEC §4.2)."""

from __future__ import annotations

from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.digests import with_digest
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.parsing import ParsedArguments
from engram_memory.core import steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.runtime import CallContext
from engram_memory.search.packets import packet_budget
from engram_memory.search.receipts import digest_of_json
from engram_memory.tools import reading
from engram_memory.tools.record_redaction import RecordRedactions, base_classifiers, redaction_of

DEFAULT_MAX_PACKET_BYTES = 65_536


def get(ctx: CallContext, audit: CallAudit, parsed: ParsedArguments) -> ToolOutcome:
    """Raises: ToolError: NOT_FOUND (unknown, foreign, ineligible alike), PROJECTION_OVERSIZED."""
    args = parsed.arguments
    record_id = str(args["record_id"])
    audit.targets(record_id)
    authz = steps.authorize(ctx, audit, base_classifiers(parsed.classifiers))
    as_of = reading.published_as_of(ctx)
    # From the read cache when it holds the row (no statement), else one snapshot read.
    with reading.Snapshot(ctx) as snapshot:
        row = reading.current_rows(ctx, [record_id], snapshot).get(record_id)
    if row is None or not reading.is_eligible(row, as_of, ctx.now_ms):
        raise ToolError(ErrorCode.NOT_FOUND, "record not available")
    record = steps.open_item(ctx, record_id, row.sealed_body)
    # The decision for this record's classifier names (the call's own when none matched):
    # its redaction applies, and the read receipt binds it.
    applied = RecordRedactions(ctx, audit, authz, parsed.classifiers).applied(record)
    redaction = redaction_of(applied)
    view, omitted, redaction_digest = reading.redacted_view(ctx, redaction, record)
    read_receipt = with_digest(
        "read-receipt",
        {
            "record_id": record_id,
            "record_digest": record["record_digest"],
            "valid_as_of": as_of.valid_as_of,
            "system_as_of": str(as_of.system_as_of),
            "validated_through_cursor": str(as_of.system_as_of),
            "authorization_receipt_digest": applied.decision.receipt.receipt_digest,
            "revalidation_receipt_digest": reading.revalidation_receipt_digest(
                [record_id], as_of, ctx.now_instant
            ),
            "checked_at": ctx.now_instant,
        },
    )
    packet: dict[str, JsonValue] = {
        "record": view,
        "redacted_fields": omitted,
        "redaction_receipt_digest": redaction_digest,
        "read_receipt": read_receipt,
    }
    # Serialized once: the digest is over these bytes, and the packet's JCS length is theirs
    # plus its one more member, `"packet_digest":"sha256:…"` and a comma.
    packet_json = canonical_json(packet)
    packet["packet_digest"] = digest_of_json("read-packet", packet_json)
    digest_member = b'"packet_digest":' + canonical_json(packet["packet_digest"]) + b","
    budget = packet_budget(
        int(args.get("max_packet_bytes", DEFAULT_MAX_PACKET_BYTES)),
        redaction.max_packet_bytes,
    )
    if len(packet_json) + len(digest_member) > budget:
        raise ToolError(ErrorCode.PROJECTION_OVERSIZED, "record over packet budget")
    return ToolOutcome.succeeded(packet, audit)
