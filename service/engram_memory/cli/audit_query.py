"""`engram-memory audit query NAME` and `audit sql`: answer audit questions from an export.

Both read an audit export (`--export DIR`) or take a fresh, verified export of a data
directory into a private temporary directory first (`--data-dir DIR`), and read it through
an in-memory DuckDB whose views `audit_entries`, `decision_receipts` and `journal_events` are
the exported tables (admin/audit_views.py). Results go to stdout; progress to stderr.

Exit codes: 0 answered; 1 the export does not match its manifest, or the store does not
verify; 2 bad usage: an unknown query or parameter, a missing or unusable value, a directory
that is not an export, SQL that does not run.

Their parsers are in audit_parsers.py, so that `engram-memory audit` builds them without
loading DuckDB or the export code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import duckdb

from engram_memory.admin.audit_access import EXIT_REFUSED, operator_of
from engram_memory.admin.audit_output import render
from engram_memory.admin.audit_queries import (
    NamedQuery,
    bind_params,
    find_query,
    load_named_queries,
    parse_query_file,
)
from engram_memory.admin.audit_views import opened_source
from engram_memory.admin.identities import identity_map, load_identities
from engram_memory.contract.exceptions import (
    AuditAccessFailed,
    ExportTampered,
    ExportUnusable,
    QueryFileInvalid,
    QueryUsageError,
    ToolError,
)

EXIT_FAILED = 1  # the export or store cannot be trusted or read as exported
EXIT_USAGE = 2
PROMPT = "audit> "


def _refused(command: str, error: ToolError) -> int:
    """The code of a refused export (exit 5, as `audit export` exits)."""
    print(f"engram-memory: {command}: refused: {error.code.name}", file=sys.stderr)
    return EXIT_REFUSED


def _usage(line: str) -> int:
    print(f"engram-memory: {line}", file=sys.stderr)
    return EXIT_USAGE


def _list(fmt: str) -> int:
    rows = [
        (
            query.name,
            " ".join(
                f"{p.name}={p.kind}" if p.required else f"[{p.name}={p.kind}]" for p in query.params
            ),
            query.description,
        )
        for query in load_named_queries().values()
    ]
    sys.stdout.write(render(("name", "params", "description"), rows, fmt))
    return 0


def run_query(args: argparse.Namespace) -> int:
    """`audit query`: one named query, its parameters bound, in the chosen format."""
    if args.list:
        return _list(args.format)
    if (args.name is None) == (args.file is None):
        return _usage("audit query: name a query or give --file (one of them), or --list")
    try:
        query = (
            find_query(load_named_queries(), args.name)
            if args.file is None
            else _own_query(args.file)
        )
        params = bind_params(query, args.param)
        if args.identities is not None:
            load_identities(args.identities)  # a bad file fails before anything is exported
    except QueryUsageError as exc:
        return _usage(f"audit query: {exc}")
    if args.export is None and args.data_dir is None:
        return _usage("audit query: --export DIR or --data-dir DIR is required")
    try:
        with opened_source(args.export, args.data_dir, operator_of(args)) as con:
            result = con.execute(query.sql, params)
            columns = [d[0] for d in result.description or ()]
            rows = result.fetchall()
            if args.identities is not None:
                scopes = con.execute("SELECT DISTINCT scope_ref FROM audit_entries").fetchall()
                rows = identity_map(args.identities, (s[0] for s in scopes)).rows(rows)
    except QueryUsageError as exc:
        return _usage(f"audit query: {exc}")
    except ExportUnusable as exc:
        return _usage(f"audit query: {exc}")
    except (ExportTampered, AuditAccessFailed) as exc:
        print(f"engram-memory: audit query: FAILED: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except ToolError as error:  # the server refused the export (UNAUTHORIZED, ...)
        return _refused("audit query", error)
    except duckdb.Error as exc:  # an own query's SQL, or tables not what a query reads
        print(f"engram-memory: audit query {query.name}: {_first_line(exc)}", file=sys.stderr)
        return EXIT_USAGE if args.file is not None else EXIT_FAILED
    sys.stdout.write(render(columns, rows, args.format))
    print(f"({len(rows)} rows)", file=sys.stderr)
    return 0


def _own_query(path: Path) -> NamedQuery:
    """The auditor's own query file, read like a shipped one.

    Raises:
        QueryUsageError: the file cannot be read or its header is malformed.
    """
    try:
        return parse_query_file(path.stem, path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        raise QueryUsageError(f"cannot read query file {path}") from None
    except QueryFileInvalid as exc:
        raise QueryUsageError(str(exc)) from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _execute(con: duckdb.DuckDBPyConnection, sql: str, fmt: str) -> None:
    """Run `sql`; print the result of its last statement, if that returns rows.

    Raises:
        duckdb.Error: the SQL does not run.
    """
    result = con.execute(sql)
    if result.description:
        columns = [d[0] for d in result.description]
        sys.stdout.write(render(columns, result.fetchall(), fmt))


def _statements(stream: TextIO, interactive: bool) -> Iterator[str]:
    """Statements from `stream`, each ending at a line that ends with `;`."""
    pending: list[str] = []
    while True:
        if interactive:
            print(PROMPT if not pending else "   ...> ", end="", file=sys.stderr, flush=True)
        line = stream.readline()
        if not line:
            break
        if not pending and line.strip() in (".quit", ".exit", "\\q"):
            return
        pending.append(line)
        if line.rstrip().endswith(";"):
            yield "".join(pending)
            pending = []
    if "".join(pending).strip():
        yield "".join(pending)


def run_sql(args: argparse.Namespace) -> int:
    """`audit sql`: `-c SQL`, or statements from stdin (a prompt when it is a terminal).

    A statement that fails prints one line; from a terminal the shell goes on, otherwise it
    stops with exit code 2.
    """
    try:
        with opened_source(args.export, args.data_dir, operator_of(args)) as con:
            if args.command is not None:
                try:
                    _execute(con, args.command, args.format)
                except duckdb.Error as exc:
                    return _usage(f"audit sql: {_first_line(exc)}")
                return 0
            interactive = sys.stdin.isatty()
            if interactive:
                print(
                    "views: audit_entries, decision_receipts, journal_events; "
                    "end statements with ';', .quit to leave",
                    file=sys.stderr,
                )
            try:
                for statement in _statements(sys.stdin, interactive):
                    try:
                        _execute(con, statement, args.format)
                    except duckdb.Error as exc:
                        if not interactive:
                            return _usage(f"audit sql: {_first_line(exc)}")
                        print(f"error: {_first_line(exc)}", file=sys.stderr)
            except KeyboardInterrupt:  # Ctrl-C leaves the shell quietly
                print(file=sys.stderr)
    except ExportUnusable as exc:
        return _usage(f"audit sql: {exc}")
    except (ExportTampered, AuditAccessFailed) as exc:
        print(f"engram-memory: audit sql: FAILED: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except ToolError as error:  # the server refused the export (UNAUTHORIZED, ...)
        return _refused("audit sql", error)
    return 0
