"""Issue 20 phase 3: a capture commits by one call-log record of rows as values. What is
projected is byte for byte what was acknowledged; what must see the capture before it is
projected does (a replay, the admission's pre-read, the key's ownership check); and content
ended by withdraw leaves no segment that held its capture's plain digests."""

from __future__ import annotations

import json
import uuid
from typing import Any

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.runtime import Services
from engram_memory.store.projection import LoggedCall
from tests.harness import Caller
from tests.tools.test_tool_rules import admit, code, value, withdraw

SCOPE = "tenant:acme/workspace:support"


def _capture(alice: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
    return value(alice.call("engram_memory_capture", arguments))


def _arguments(text: str = "Refund approved for order 12.") -> dict[str, Any]:
    return demo_capture_arguments(text, f"cap-{uuid.uuid4().hex}")


def _last_record(services: Services) -> LoggedCall:
    log = services.database.call_log
    assert log is not None
    head = log.durable_head().sequence
    ((_, payload),) = list(log.read_from(head))
    return LoggedCall.decode(payload)


def _file_rows(services: Services, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    services.database.project()
    with services.database.reading() as tx:
        return tx.fetchall(sql, list(params))


def test_a_capture_is_one_record_and_its_projection_writes_exactly_its_rows(
    alice: Caller, services: Services
) -> None:
    captured = _capture(alice, _arguments())
    record = _last_record(services)
    assert sorted(record.tables) == ["candidates", "idempotency", "journal_events"]
    (event,) = record.tables["journal_events"]
    (candidate,) = record.tables["candidates"]
    (result,) = record.tables["idempotency"]
    assert [row[7] for row in record.batch.rows] == ["engram_memory_capture"]
    assert event[1] == int(captured["cursor"])
    assert candidate[1] == captured["candidate_id"]
    assert json.loads(result[5]) == captured  # the first result, as answered

    # Projected: the file holds the recorded values, hashes included, none recomputed.
    (stored_event,) = _file_rows(
        services,
        "SELECT scope_ref, cursor, event_id, operation, target_id, event_json, "
        "previous_event_hash, event_hash, intent_digest FROM journal_events WHERE event_id = ?",
        event[2],
    )
    assert list(stored_event) == event
    (stored_candidate,) = _file_rows(
        services,
        "SELECT sealed_body, guard_digest, state FROM candidates WHERE candidate_id = ?",
        candidate[1],
    )
    assert bytes(stored_candidate[0]) == candidate[8]
    assert stored_candidate[1:] == (candidate[4], "pending")
    (stored_result,) = _file_rows(
        services, "SELECT result_json FROM idempotency WHERE key_digest = ?", result[2]
    )
    assert stored_result[0] == result[5]
    (entry,) = _file_rows(
        services,
        "SELECT entry_hash FROM audit_entries WHERE sequence = ?",
        record.batch.rows[0][0],
    )
    assert entry[0] == record.batch.rows[0][16]


def test_a_replay_of_an_unprojected_capture_answers_its_stored_result(
    alice: Caller, services: Services
) -> None:
    arguments = _arguments()
    first = _capture(alice, arguments)
    assert services.database.pending_rows()  # the harness runs no background projector
    again = _capture(alice, arguments)
    assert again == {**first, "status": "duplicate_exact"}
    assert services.database.pending_rows()  # found in memory: nothing was projected
    # The same key for another operation: the pending result's operation digest refuses it.
    other = {**arguments, "payload": _arguments("Other.")["payload"]}
    assert code(alice.call("engram_memory_capture", other)) == "DIGEST_CONFLICT"


def test_the_admission_of_an_unprojected_capture_finds_its_candidate(
    alice: Caller, services: Services
) -> None:
    captured = _capture(alice, _arguments())
    assert services.database.pending_rows()
    admitted = value(admit(alice, captured["candidate_id"]))
    assert admitted["outcome"]["status"] == "accepted"
    assert not services.database.pending_rows()  # its transaction projected it first


def test_a_withdraw_sheds_every_segment_that_held_the_capture(
    alice: Caller, services: Services
) -> None:
    captured = _capture(alice, _arguments("Courier lost parcel 4410."))
    record = _last_record(services)
    (candidate,) = record.tables["candidates"]
    guard = str(candidate[4]).encode("ascii")
    log = services.database.call_log
    assert log is not None
    segments = log.segment_paths()  # type: ignore[attr-defined]
    assert any(guard in path.read_bytes() for path in segments)
    value(withdraw(alice, captured["candidate_id"]))
    for path in log.segment_paths():  # type: ignore[attr-defined]
        assert guard not in path.read_bytes()
    assert not any(path.exists() for path in segments)  # shredded, a new one written
