"""Query results as an aligned table, RFC 4180 CSV, or a JSON array of objects.

Every format renders a value the same way: timestamps as ISO 8601 UTC
(`2026-12-02T04:15:02.123Z`, microseconds only when present), dates as `YYYY-MM-DD`, lists and
structs as JSON. CSV has a header row, CRLF line ends, and quotes exactly the fields that
need it; NULL is an empty field. JSON keeps numbers, booleans and NULL typed. The table is
for people: control characters are shown escaped so that no stored value can drive the
terminal.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from engram_memory.contract.canonical import JsonValue

FORMATS = ("table", "csv", "json")


def instant_text(moment: datetime) -> str:
    """ISO 8601 UTC, milliseconds unless finer precision is present (naive means UTC)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    spec = "milliseconds" if moment.microsecond % 1000 == 0 else "microseconds"
    return moment.isoformat(timespec=spec) + "Z"


def json_value(value: Any) -> JsonValue:
    """A DuckDB result value as JSON (see the module docstring)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        return instant_text(value)
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return str(value)


def text_value(value: Any) -> str:
    """A value as one CSV field or table cell (NULL is empty)."""
    rendered = json_value(value)
    if rendered is None:
        return ""
    if isinstance(rendered, bool):
        return "true" if rendered else "false"
    if isinstance(rendered, dict | list):
        return json.dumps(rendered, ensure_ascii=False, separators=(",", ":"))
    return str(rendered)


def _printable(text: str) -> str:
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str) -> str:
    """`rows` under `columns` in `fmt` (one of FORMATS), ending with a line end.

    Raises:
        ValueError: an unknown format (the CLI offers only FORMATS).
    """
    if fmt == "json":
        objects = [
            {column: json_value(value) for column, value in zip(columns, row, strict=True)}
            for row in rows
        ]
        return json.dumps(objects, ensure_ascii=False, indent=2) + "\n"
    if fmt == "csv":
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer, lineterminator="\r\n")
        writer.writerow(columns)
        writer.writerows([text_value(v) for v in row] for row in rows)
        return buffer.getvalue()
    if fmt == "table":
        return _table(columns, rows)
    raise ValueError(f"unknown format {fmt}")


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_printable(c) for c in columns]]
    cells += [[_printable(text_value(v)) if v is not None else "NULL" for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = [
        " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in cells
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines) + "\n"
