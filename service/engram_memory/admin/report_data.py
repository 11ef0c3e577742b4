"""What the audit report shows, answered by the shipped named queries.

Every figure of the report is a named query's answer for the report's range, run on the same
export views `audit query` reads (admin/audit_views.py), so an auditor can re-derive any
number with `audit query NAME --param from=... --param to=...`. Nothing here computes a
figure of its own; the sections only sum or select rows of those answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb

from engram_memory.admin.audit_queries import load_named_queries
from engram_memory.admin.identities import EMPTY, IdentityMap

# The sections, in report order: (named query, title).
SECTIONS = (
    ("calls_per_day", "Calls and refusals per day"),
    ("refusals_by_reason", "Refusals by reason"),
    ("revisions_in_force", "Policy bundle revisions in force"),
    ("decisions_per_revision", "Decisions per bundle revision"),
    ("admissions_held", "Admissions held for adjudication"),
    ("who_approved_destructive_calls", "Destructive calls and their approvers"),
)


@dataclass(frozen=True)
class QueryAnswer:
    name: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def column(self, name: str) -> list[Any]:
        index = self.columns.index(name)
        return [row[index] for row in self.rows]


@dataclass(frozen=True)
class ReportData:
    start: datetime | None
    end: datetime | None
    answers: dict[str, QueryAnswer]
    verification: list[str] = field(default_factory=list)  # transcript lines

    @property
    def total_calls(self) -> int:
        return sum(int(v) for v in self.answers["calls_per_day"].column("calls"))

    @property
    def total_refusals(self) -> int:
        return sum(int(v) for v in self.answers["calls_per_day"].column("refusals"))


def gather(
    con: duckdb.DuckDBPyConnection,
    start: datetime | None,
    end: datetime | None,
    names: IdentityMap = EMPTY,
) -> dict[str, QueryAnswer]:
    """Each section's named query answered over [start, end) (None: unbounded); hashed
    principals shown as names when `names` knows them.

    Raises:
        duckdb.Error: the export's tables are not what the queries read.
    """
    queries = load_named_queries()
    answers = {}
    for name, title in SECTIONS:
        result = con.execute(queries[name].sql, {"from": start, "to": end})
        columns = tuple(d[0] for d in result.description or ())
        rows: Sequence[Sequence[Any]] = result.fetchall()
        answers[name] = QueryAnswer(name, title, columns, tuple(names.rows(rows)))
    return answers


def resolution_seconds(held: QueryAnswer) -> list[float]:
    """Seconds from each resolved hold to its resolution (pending holds are left out)."""
    pairs = zip(held.column("held_at"), held.column("resolved_at"), strict=True)
    return [
        (resolved - at).total_seconds()
        for at, resolved in pairs
        if isinstance(at, datetime) and isinstance(resolved, datetime)
    ]
