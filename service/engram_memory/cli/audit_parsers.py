"""The parsers of `engram-memory audit`'s subcommands shared or kept apart from their code.

Building them imports nothing from admin/, store/ or DuckDB (cli/main.py: a command's parser
must be cheap); audit.py and audit_query.py import what they run only when they run.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engram_memory.admin.audit_output import FORMATS


def add_access_arguments(parser: argparse.ArgumentParser) -> None:
    """The auditor's identity, for a store a server holds (all three, or none)."""
    parser.add_argument("--tenant", help="with --workspace/--operator: run inside the server")
    parser.add_argument("--workspace", help="the workspace whose maintenance block names you")
    parser.add_argument("--operator", help="the auditor: human:<subject> with read authority")


def _add_source(parser: argparse.ArgumentParser, *, required: bool) -> None:
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--export", type=Path, help="an audit export directory")
    source.add_argument(
        "--data-dir", type=Path, help="a data directory: query a fresh export of it"
    )
    add_access_arguments(parser)  # a data directory a server holds is exported inside it
    parser.add_argument("--format", choices=FORMATS, default="table", help="default: table")


def add_query_parsers(audit_sub: Any) -> None:
    """Register `audit query` and `audit sql` under `engram-memory audit`."""
    query = audit_sub.add_parser(
        "query", help="run a named audit query (`--list` shows them and their parameters)"
    )
    query.add_argument("name", nargs="?", help="the query's name")
    query.add_argument("--list", action="store_true", help="list the queries and exit")
    query.add_argument(
        "--file", type=Path, help="run your own query file (same header format) instead of NAME"
    )
    query.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter (repeatable); timestamps are ISO 8601, UTC unless an offset is given",
    )
    query.add_argument(
        "--identities",
        type=Path,
        metavar="FILE.csv",
        help="show hashed principals as names: CSV principal_id,display_name,groups[,tenant]",
    )
    _add_source(query, required=False)
    sql = audit_sub.add_parser("sql", help="an SQL shell over an export's tables (DuckDB)")
    sql.add_argument("-c", dest="command", metavar="SQL", help="run these statements and exit")
    _add_source(sql, required=True)
