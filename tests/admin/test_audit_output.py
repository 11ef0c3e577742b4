"""Rendering of audit query results and the named-query header, without a store."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from engram_memory.admin.audit_output import instant_text, json_value, render
from engram_memory.admin.audit_queries import bind_params, parse_query_file, parse_timestamp
from engram_memory.contract.exceptions import QueryFileInvalid, QueryUsageError

HEADER = """-- name: sample
-- description: A sample.
-- param: who text required: a principal
-- param: from timestamp: inclusive
-- param: to timestamp: exclusive
SELECT $who AS who WHERE $from IS NULL AND $to IS NULL;
"""


def test_instants_render_as_iso_8601_utc_with_milliseconds_unless_finer() -> None:
    assert instant_text(datetime(2026, 12, 2, 4, 15, 2, 123000)) == "2026-12-02T04:15:02.123Z"
    assert instant_text(datetime(2026, 12, 2, 4, 15, 2, 123456)) == "2026-12-02T04:15:02.123456Z"
    plus_two = timezone(timedelta(hours=2))
    assert instant_text(datetime(2026, 12, 2, 6, 0, tzinfo=plus_two)) == "2026-12-02T04:00:00.000Z"


def test_json_values_keep_numbers_typed_and_never_emit_non_finite_numbers() -> None:
    assert json_value(Decimal("12")) == 12
    assert json_value(Decimal("0.25")) == 0.25
    assert json_value(float("nan")) is None
    assert json_value(date(2026, 12, 2)) == "2026-12-02"
    assert json_value(b"\x00\xff") == "00ff"
    assert json_value([datetime(2026, 1, 1, tzinfo=UTC)]) == ["2026-01-01T00:00:00.000Z"]


def test_csv_quotes_exactly_the_fields_that_need_it_with_crlf_line_ends() -> None:
    text = render(("a", "b"), [('x,"y"', None), ("line\nbreak", True)], "csv")
    assert text == 'a,b\r\n"x,""y""",\r\n"line\nbreak",true\r\n'
    assert list(csv.reader(io.StringIO(text, newline=""))) == [
        ["a", "b"],
        ['x,"y"', ""],
        ["line\nbreak", "true"],
    ]


def test_json_is_an_array_of_objects_in_column_order() -> None:
    text = render(("n", "at"), [(1, datetime(2026, 1, 1))], "json")
    assert json.loads(text) == [{"n": 1, "at": "2026-01-01T00:00:00.000Z"}]
    assert render(("n",), [], "json") == "[]\n"


def test_the_table_shows_null_and_escapes_control_characters() -> None:
    text = render(("v",), [(None,), ("\x1b[31mred",)], "table")
    assert text.splitlines() == ["v", "-" * 11, "NULL", "\\x1b[31mred"]


def test_parameters_are_bound_by_kind_and_unknown_ones_refused() -> None:
    query = parse_query_file("sample", HEADER)
    bound = bind_params(query, ["who=user:a", "from=2026-12-01T10:00:00+01:00"])
    assert bound == {"who": "user:a", "from": datetime(2026, 12, 1, 9, 0), "to": None}
    for bad in (["from=2026-12-01"], ["who=a", "when=now"], ["who=a", "who=b"], ["who"]):
        with pytest.raises(QueryUsageError):
            bind_params(query, bad)
    assert parse_timestamp("2026-12-01") == datetime(2026, 12, 1)


def test_a_query_file_whose_header_does_not_name_it_is_invalid() -> None:
    with pytest.raises(QueryFileInvalid):
        parse_query_file("other", HEADER)
    with pytest.raises(QueryFileInvalid):
        parse_query_file("sample", HEADER.replace("who text required", "who number"))
