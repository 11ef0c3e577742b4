"""Row writes of a bulk transaction gathered into one multi-row statement per table.

DuckDB costs about a millisecond per statement whatever its size, so the import (bulk/)
spent most of a line in one-row INSERTs (bench/results/import_speed.md). `BatchedWrites`
wraps the import's write transaction and is handed, unchanged, to the same store functions
the tools call: their one-row INSERTs wait in memory and go out at `flush` as one statement
per table (a multi-row VALUES list, or the SELECTs of an `INSERT ... SELECT` joined by
UNION ALL), before the transaction commits. Nothing else changes: the chain heads, the
written keys and the index changes are the wrapped transaction's own.

What must still see the database as the statements left it does:
- A read (any fetch) first flushes what waits, then runs: reads see every write before them.
- A statement it does not know how to defer (a DELETE, an UPDATE other than those below, an
  INSERT that reads a table) first flushes, then runs: the order of effects is kept.
- The UPDATE that ends an imported candidate (`key_intents.end_candidate`: its state, its
  body cleared) targets a candidate whose INSERT still waits; it changes that waiting row
  instead (one row written in its final form). For any other candidate they
  flush and run as written.
- `get_candidate` of a candidate whose INSERT waits is answered from its waiting row(s)
  without a statement (`_candidate_lookup`). That is the whole answer unless another scope
  already holds the same id (ids are random 128-bit values: it never happens in practice),
  and `flush` checks exactly that with one query for the whole batch: if it did happen, the
  flush fails (`StoreUnavailable`) and the batch rolls back whole, so no answer given from
  the waiting rows can have been wrong in anything that commits.

A failing multi-row statement fails the transaction, as the one-row statement would have:
the caller's batch rolls back whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_memory.contract.exceptions import StoreUnavailable
from engram_memory.store.connection import load_queries
from engram_memory.store.transaction import Transaction

_MEMORY = load_queries("engram_memory.store.sql", "memory.sql")
_KEY_INTENTS = load_queries("engram_memory.store.sql", "key_intents.sql")
_OWN = load_queries("engram_memory.store.sql", "batched_writes.sql")

_COMMENT = re.compile(r"--[^\n]*")
_INSERT = re.compile(
    r"^\s*(INSERT\s+INTO\s+\w+\s*\([^()]*\))\s*(VALUES\b|SELECT\b)(.*?);?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_TUPLE_SEPARATOR = re.compile(r"\)\s*,\s*\(")
_READS_A_TABLE = re.compile(r"\b(FROM|JOIN|WHERE|UNION|ON\s+CONFLICT|RETURNING)\b", re.IGNORECASE)

# insert_candidate's parameters, in order (memory.sql): its state is the literal 'pending'.
_CANDIDATE_PARAMETERS = (
    "scope_ref",
    "candidate_id",
    "principal_ref",
    "payload_digest",
    "guard_digest",
    "record_digest",
    "record_id",
    "capture_cursor",
    "sealed_body",
    "created_at_ms",
    "updated_at_ms",
)
# get_candidate's columns, in order (memory.sql).
_CANDIDATE_COLUMNS = (
    "candidate_id",
    "state",
    "principal_ref",
    "payload_digest",
    "guard_digest",
    "record_digest",
    "record_id",
    "capture_cursor",
    "sealed_body",
    "scope_ref",
)
# batched_writes.sql's insert_candidates, row by row.
_CANDIDATE_ROW = (*_CANDIDATE_PARAMETERS[:2], "state", *_CANDIDATE_PARAMETERS[2:])


@dataclass
class _Group:
    """The waiting rows of one INSERT statement text, written at flush as one statement that
    binds one list per parameter: `INSERT INTO t (cols) SELECT <row, ? as p_i> FROM
    (SELECT unnest(?) AS p_0, ...)`. Binding lists costs DuckDB ~20x less than as many
    parameters in a multi-row VALUES list (bench/results/import_speed.md)."""

    head: str  # INSERT INTO t (columns)
    row: str  # one row's expressions, its i-th `?` written p_i
    width: int  # parameters per row
    rows_per_statement: int  # the statement's own rows (a VALUES list may hold several)
    rows: list[Sequence[Any]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return self.head, self.row

    def add(self, params: Sequence[Any]) -> None:
        """The rows of one execution of the statement (its parameters, row after row).

        Raises:
            ValueError: the parameters do not fill its rows (a programming error).
        """
        if len(params) != self.width * self.rows_per_statement:
            raise ValueError("parameters do not match the statement's rows")
        for start in range(0, len(params), self.width):
            self.rows.append(params[start : start + self.width])

    def statement(self) -> str:
        lists = ", ".join(f"unnest(?) AS p_{i}" for i in range(self.width))
        # Only statement texts of our own SQL files reach here, never a value.
        return f"{self.head} SELECT {self.row} FROM (SELECT {lists})"  # noqa: S608

    def columns(self) -> list[list[Any]]:
        return [[row[i] for row in self.rows] for i in range(self.width)]


def _numbered_parameters(expressions: str) -> tuple[str, int] | None:
    """`expressions` with its i-th `?` (outside string literals) written `p_i`, and how many
    there were; None when a literal is not closed."""
    parts = expressions.split("'")
    if len(parts) % 2 == 0:
        return None
    count = 0
    for i in range(0, len(parts), 2):  # even parts lie outside literals
        pieces = parts[i].split("?")
        numbered = pieces[0]
        for piece in pieces[1:]:
            numbered += f"p_{count}" + piece
            count += 1
        parts[i] = numbered
    return "'".join(parts), count


def _deferrable(sql: str) -> _Group | None:
    """The group an INSERT's rows may wait in; None when the statement must run now (it
    reads a table, holds several VALUES rows, or is not an INSERT)."""
    match = _INSERT.match(_COMMENT.sub("", sql))
    if match is None:
        return None
    head, keyword, body = match.group(1), match.group(2).upper(), match.group(3).strip()
    if not body or _READS_A_TABLE.search(body):
        return None
    rows = 1
    if keyword == "VALUES":
        if not (body.startswith("(") and body.endswith(")")):
            return None
        tuples = _TUPLE_SEPARATOR.split(body[1:-1])
        if any(t != tuples[0] or "(" in t or ")" in t for t in tuples):
            return None  # rows that differ, or an expression: runs where it stands
        body, rows = tuples[0], len(tuples)
    numbered = _numbered_parameters(body)
    if numbered is None or numbered[1] == 0:
        return None
    return _Group(" ".join(head.split()), numbered[0], numbered[1], rows)


class BatchedWrites(Transaction):
    """A write transaction whose row INSERTs wait for one statement per table (`flush`).

    It shares the wrapped transaction's state (its `__dict__`): what the base class tracks
    (chain heads, written keys, index changes, whether it wrote) is the same object either
    way, so every method it does not override behaves exactly as the wrapped one's.
    """

    def __init__(self, inner: Transaction) -> None:
        self.__dict__ = inner.__dict__
        self._batched_statements: dict[str, _Group | None] = {}  # statement text -> its form
        self._batched_groups: dict[tuple[str, str], _Group] = {}  # in first-seen order
        self._batched_candidates: dict[tuple[str, str], dict[str, Any]] = {}
        self._batched_candidate_scopes: dict[str, list[str]] = {}  # candidate id -> scopes
        self._answered_waiting: set[str] = set()  # ids `get_candidate` answered unflushed

    # -- writes --------------------------------------------------------------------------

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        if sql == _MEMORY["insert_candidate"]:
            self._will_write()
            self._wait_candidate(list(params))
            return
        if self._changed_waiting_candidate(sql, params):
            self._will_write()
            return
        form = self._form_of(sql)
        if form is None:
            self.flush()
            super().execute(sql, params)
            return
        self._will_write()
        group = self._batched_groups.get(form.key)
        if group is None:
            group = _Group(form.head, form.row, form.width, 1)
            self._batched_groups[form.key] = group
        group.rows_per_statement = form.rows_per_statement
        group.add(params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.flush()
        super().executemany(sql, rows)

    def _form_of(self, sql: str) -> _Group | None:
        if sql not in self._batched_statements:
            self._batched_statements[sql] = _deferrable(sql)
        return self._batched_statements[sql]

    def _wait_candidate(self, params: list[Any]) -> None:
        row = dict(zip(_CANDIDATE_PARAMETERS, params, strict=True))
        row["state"] = "pending"  # insert_candidate's literal
        key = (str(row["scope_ref"]), str(row["candidate_id"]))
        if key in self._batched_candidates:
            # A second insert of the same key: let the database refuse it, as it would have.
            self.flush()
            super().execute(_MEMORY["insert_candidate"], params)
            return
        self._batched_candidates[key] = row
        self._batched_candidate_scopes.setdefault(key[1], []).append(key[0])

    def _changed_waiting_candidate(self, sql: str, params: Sequence[Any]) -> bool:
        """Apply an UPDATE of a waiting candidate to its row; False when it is not one."""
        if sql == _KEY_INTENTS["end_candidate"]:
            state, at, scope_ref, candidate_id = params
            row = self._batched_candidates.get((str(scope_ref), str(candidate_id)))
            if row is None:
                return False
            row["state"], row["updated_at_ms"], row["sealed_body"] = state, at, None
            return True
        return False

    def flush(self) -> None:
        """Write every waiting row: candidates first (the other rows name them), then each
        INSERT's rows in the order their statements were first seen.

        Raises:
            StoreUnavailable / StoreCorrupt: a statement failed (the transaction must roll back).
        """
        if self._answered_waiting:
            answered, self._answered_waiting = sorted(self._answered_waiting), set()
            if super().fetchall(_OWN["stored_candidate_ids"], [answered]):
                raise StoreUnavailable("a new candidate id is already held; run the batch again")
        if self._batched_candidates:
            candidates = _deferrable(_OWN["insert_candidates"])
            if candidates is None:  # batched_writes.sql is ours: a programming error
                raise ValueError("insert_candidates is not a one-row INSERT")
            for row in self._batched_candidates.values():
                candidates.add([row[name] for name in _CANDIDATE_ROW])
            self._batched_candidates.clear()
            self._batched_candidate_scopes.clear()
            super().execute(candidates.statement(), candidates.columns())
        groups = list(self._batched_groups.values())
        self._batched_groups.clear()
        for group in groups:
            super().execute(group.statement(), group.columns())

    # -- reads ---------------------------------------------------------------------------

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if sql == _MEMORY["get_candidate"]:
            waiting = self._candidate_lookup(str(params[0]))
            if waiting is not None:
                return waiting
        self.flush()
        return super().fetchall(sql, params)

    def _candidate_lookup(self, candidate_id: str) -> list[tuple[Any, ...]] | None:
        """`get_candidate`'s rows for a waiting candidate: its waiting row(s), the stored
        rows of that id being none (checked at `flush`). None when nothing waits for it."""
        scopes = self._batched_candidate_scopes.get(candidate_id)
        if scopes is None:
            return None
        self._answered_waiting.add(candidate_id)
        return [
            tuple(
                self._batched_candidates[(scope, candidate_id)][name] for name in _CANDIDATE_COLUMNS
            )
            for scope in scopes
        ]

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        self.flush()
        return super().fetchone(sql, params)

    def fetch_columns(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any]:
        self.flush()
        return super().fetch_columns(sql, params)

    def count_rows(self, sql: str, batch: int = 4096) -> int:
        self.flush()
        return super().count_rows(sql, batch)
