"""The auditor's named queries: `audit/queries/*.sql`, their header, and their parameters.

Each query is one `.sql` file whose leading comment block the CLI reads:

    -- name: <the file's stem>
    -- description: <one line>
    -- param: <name> <text|timestamp> [required]: <one line>
    -- (any further comment lines are notes for the reader)

Parameters are always bound as DuckDB named parameters (`$name`), never spliced into the SQL
text, so a value can never change what a query does. An optional parameter the caller leaves
out is bound as NULL, which every query reads as "unbounded". Timestamps are taken as ISO 8601
(`2026-12-01`, `2026-12-01T09:30:00Z`, an offset such as `+02:00`); one without an offset is
UTC, and every value is bound as a UTC TIMESTAMP. `from` is inclusive, `to` exclusive.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources

from engram_memory.contract.exceptions import QueryFileInvalid, QueryUsageError

QUERY_PACKAGE = "engram_memory.admin"
QUERY_DIRECTORY = "named_queries"  # audit/queries is a link to it, for readers of the repo
PARAM_KINDS = ("text", "timestamp")
_NAME = re.compile(r"[a-z][a-z0-9_]*")  # fullmatch only
_HEADER = re.compile(r"^-- (name|description|param): (.*)$")
_PARAM = re.compile(r"^([a-z][a-z0-9_]*) (text|timestamp)( required)?: (.+)$")
ParamValue = str | datetime | None


@dataclass(frozen=True)
class QueryParam:
    name: str
    kind: str  # one of PARAM_KINDS
    required: bool
    help: str


@dataclass(frozen=True)
class NamedQuery:
    name: str
    description: str
    params: tuple[QueryParam, ...]
    sql: str

    def param(self, name: str) -> QueryParam | None:
        return next((p for p in self.params if p.name == name), None)


def parse_query_file(stem: str, text: str) -> NamedQuery:
    """The query of one file; its header must name the file's stem.

    Raises:
        QueryFileInvalid: the header lacks a name matching `stem` or a description, or
            declares a parameter in another form or twice.
    """
    fields: dict[str, str] = {}
    params: list[QueryParam] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        match = _HEADER.match(line)
        if match is None:
            continue
        key, value = match.groups()
        if key != "param":
            fields.setdefault(key, value.strip())
            continue
        declared = _PARAM.match(value)
        if declared is None or any(p.name == declared[1] for p in params):
            raise QueryFileInvalid(f"query {stem}: malformed or repeated param line")
        params.append(QueryParam(declared[1], declared[2], bool(declared[3]), declared[4]))
    if fields.get("name") != stem or not fields.get("description"):
        raise QueryFileInvalid(f"query {stem}: header needs '-- name: {stem}' and a description")
    return NamedQuery(stem, fields["description"], tuple(params), text)


def load_named_queries() -> dict[str, NamedQuery]:
    """Every shipped named query, by name, in name order.

    Raises:
        QueryFileInvalid: a shipped file's header is malformed.
    """
    directory = resources.files(QUERY_PACKAGE).joinpath(QUERY_DIRECTORY)
    queries: dict[str, NamedQuery] = {}
    for entry in sorted(directory.iterdir(), key=lambda e: e.name):
        stem = entry.name.removesuffix(".sql")
        if entry.name.endswith(".sql") and _NAME.fullmatch(stem):
            queries[stem] = parse_query_file(stem, entry.read_text(encoding="utf-8"))
    return queries


def find_query(queries: Mapping[str, NamedQuery], name: str) -> NamedQuery:
    """The query called `name`.

    Raises:
        QueryUsageError: no query has that name.
    """
    query = queries.get(name)
    if query is None:
        raise QueryUsageError(f"unknown query {name!r} (`audit query --list` lists them)")
    return query


def parse_timestamp(text: str) -> datetime:
    """An ISO 8601 date or instant as a naive UTC datetime (no offset means UTC).

    Raises:
        QueryUsageError: `text` is not an ISO 8601 date or date-time.
    """
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise QueryUsageError(
            "not an ISO 8601 date or instant (e.g. 2026-12-01 or 2026-12-01T09:30:00Z)"
        ) from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def bind_params(query: NamedQuery, assignments: Sequence[str]) -> dict[str, ParamValue]:
    """The named parameters of `query` from `key=value` assignments: every declared
    parameter is bound, the ones not given as NULL.

    Raises:
        QueryUsageError: an assignment without `=`, an undeclared or repeated parameter, a
            required one missing, a value its kind does not accept, or `to` not after `from`.
    """
    given: dict[str, str] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        key = key.strip()
        if not sep:
            raise QueryUsageError(f"--param {key!r}: expected key=value")
        param = query.param(key)
        if param is None:
            names = ", ".join(p.name for p in query.params) or "none"
            raise QueryUsageError(
                f"query {query.name} has no parameter {key!r} (it takes: {names})"
            )
        if key in given:
            raise QueryUsageError(f"parameter {key!r} given twice")
        given[key] = value
    bound: dict[str, ParamValue] = {}
    for param in query.params:
        if param.name not in given:
            if param.required:
                raise QueryUsageError(f"query {query.name} needs --param {param.name}=...")
            bound[param.name] = None
        elif param.kind == "timestamp":
            try:
                bound[param.name] = parse_timestamp(given[param.name])
            except QueryUsageError as exc:
                raise QueryUsageError(f"parameter {param.name!r}: {exc}") from None
        else:
            bound[param.name] = given[param.name]
    start, end = bound.get("from"), bound.get("to")
    if isinstance(start, datetime) and isinstance(end, datetime) and end <= start:
        raise QueryUsageError("the range is empty: 'to' (exclusive) must be after 'from'")
    return bound
