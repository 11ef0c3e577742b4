"""Issue 3, rule 9 — unknown failures map to STORE_UNAVAILABLE / CAPABILITY_UNAVAILABLE, and
no raw exception text, path or SQL reaches an envelope or a log line.

CAPABILITY_UNAVAILABLE for an unexpected exception (before commit, and in a read) is proven
in tests/tools/test_fail_closed.py; MUTATION_OUTCOME_UNKNOWN after commit there too (see
tests/RULES.md). Here: failures of the two stores whose own error text names SQL and paths.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.envelope import failure_envelope
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import StoreUnavailable
from engram_memory.core.runtime import Services
from tests.harness import Caller, fresh_key
from tests.rules.steps import CAPTURE, GET, SEARCH, get_args
from tests.tools.test_tool_rules import accepted_record, high_water


def _raw_duckdb_error(services: Services, sql: str) -> str:
    """The driver's own text for `sql` (what must never leak)."""
    with pytest.raises(StoreUnavailable) as raised, services.database.transaction() as tx:
        tx.fetchall(sql)
    cause = raised.value.__cause__
    assert isinstance(cause, duckdb.Error)
    return str(cause)


def _assert_constant_failure(
    envelope: dict[str, Any], code: ErrorCode, leaks: list[str], logs: str
) -> None:
    assert envelope == failure_envelope(code, str(envelope["auditId"]))
    text = json.dumps(envelope)
    for leak in leaks:
        assert leak not in text
        assert leak not in logs


# DuckDB refuses to rename a table that has an index, so the lookup index goes first.
BREAK = {
    "candidates": (
        "DROP INDEX candidates_candidate_id",
        "ALTER TABLE candidates RENAME TO candidates_lost",
    ),
    "records": ("DROP INDEX records_record_id", "ALTER TABLE records RENAME TO records_lost"),
}
PROBE = {"candidates": "SELECT * FROM candidates", "records": "SELECT * FROM records"}


@pytest.mark.parametrize("tool", [CAPTURE, GET, SEARCH])
def test_unknown_store_failure_is_store_unavailable_without_raw_text_or_sql(
    alice: Caller,
    services: Services,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    tool: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    record_id = accepted_record(alice, "Readable until the store breaks.")
    cursor = high_water(services)
    table = "candidates" if tool == CAPTURE else "records"
    with services.database.transaction() as tx:
        for statement in BREAK[table]:
            tx.execute(statement)
    # A read finds the record in memory when it can (store/read_cache.py): with the cache
    # emptied, get and search read the broken table, which is the failure under test.
    services.database.read_cache.clear()
    raw = _raw_duckdb_error(services, PROBE[table])
    arguments: dict[str, Any] = {
        CAPTURE: demo_capture_arguments("Never stored.", fresh_key()),
        GET: get_args(alice, record_id),
        SEARCH: {"query": "readable", "purpose_ref": alice.purpose_ref},
    }[tool]

    envelope = alice.call(tool, arguments)

    _assert_constant_failure(
        envelope,
        ErrorCode.STORE_UNAVAILABLE,
        [raw, raw.splitlines()[0], f"{table}_lost", "SELECT", str(tmp_path)],
        caplog.text,
    )
    assert high_water(services) == cursor


def test_unknown_key_store_failure_is_store_unavailable_without_a_path(
    alice: Caller, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    keys = services.keys.directory
    shutil.rmtree(keys, ignore_errors=True)
    keys.write_bytes(b"not a directory")  # every key write now fails with an OSError
    with pytest.raises(NotADirectoryError) as raised:
        (keys / "probe").mkdir(parents=True)
    raw = str(raised.value)

    envelope = alice.call(CAPTURE, demo_capture_arguments("No key, no capture.", fresh_key()))

    _assert_constant_failure(
        envelope, ErrorCode.STORE_UNAVAILABLE, [raw, str(keys), "Errno"], caplog.text
    )
    assert high_water(services) == 0
