"""`get` serializes its packet once (issue 20 item 3): the packet digest and the budget check
are exactly those of the whole packet serialized again."""

from __future__ import annotations

from engram_memory.contract.canonical import canonical_json
from engram_memory.contract.digests import digest
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record, code, value

GET = "engram_memory_get"


def test_the_packet_digest_and_the_budget_are_the_whole_packets(alice: Caller) -> None:
    record_id = accepted_record(alice, "Courier lost parcel 3131; refund ✓ approved. " * 120)
    args = {"record_id": record_id, "purpose_ref": alice.purpose_ref}
    packet = value(alice.call(GET, args))

    assert packet["packet_digest"] == digest("read-packet", packet, field="packet_digest")
    size = len(canonical_json(packet))
    # The receipt's instants may differ call to call, never the packet's length.
    assert value(alice.call(GET, {**args, "max_packet_bytes": size}))["record"]
    assert code(alice.call(GET, {**args, "max_packet_bytes": size - 1})) == "PROJECTION_OVERSIZED"
