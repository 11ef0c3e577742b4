"""`engram-memory import`: load a JSONL file of captures for one scope (bulk/importer.py).

The run is an operator's act: the named human needs the `maintain` authority of the workspace
(`engram.maintenance`), and the run is audited as `admin:import` with its counts; each line is
audited as the two tool calls it makes, bound to `--principal` and `--purpose`. Prints a JSON
summary on stdout and progress on stderr; exit 0 when every line was processed (refused lines
are counted), 1 when the run itself was refused or stopped, 2 on a configuration problem
(including a data directory a running server holds: DuckDB admits one writer).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_memory.bulk import DEFAULT_BATCH, DEFAULT_WORKERS
from engram_memory.cli.service_flags import add_service_flags, config_from_flags
from engram_memory.contract.exceptions import ConfigurationError

if TYPE_CHECKING:
    from engram_memory.admin.maintenance import Operator
    from engram_memory.bulk.importer import ImportBinding
    from engram_memory.contract.canonical import JsonValue
    from engram_memory.core.call_audit import CallAudit, ToolOutcome
    from engram_memory.core.runtime import CallContext, Services


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "import",
        help="load JSONL captures for one scope through the tools' own checks, batched",
    )
    add_service_flags(parser)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--principal", required=True, help="whose captures these are")
    parser.add_argument("--purpose", required=True, help="the bound purpose_ref: purpose:<x>")
    parser.add_argument("--operator", required=True, help="the human running it: human:<x>")
    parser.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        help=f"lines per write transaction (default {DEFAULT_BATCH})",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help="processes doing each line's own checks, decisions and sealing, beside the one "
        f"that writes (default {DEFAULT_WORKERS}; 1: all in one process)",
    )
    parser.add_argument("file", help="JSONL, one engram_memory_capture arguments object a line")
    return parser


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line; undecodable bytes become U+FFFD, which
    the argument checks then refuse with the line (never the run).

    Raises:
        ConfigurationError: the file cannot be read.
    """
    try:
        with path.open("rb") as lines:
            for number, raw in enumerate(lines, start=1):
                text = raw.decode("utf-8", errors="replace").strip()
                if text:
                    yield number, text
    except OSError as exc:
        raise ConfigurationError(f"import file {path} cannot be read") from exc


def _count_lines(path: Path) -> int:
    return sum(1 for _ in numbered_lines(path))


def import_file(
    services: Services,
    who: Operator,
    binding: ImportBinding,
    path: Path,
    batch: int,
    workers: int = 1,
) -> dict[str, JsonValue]:
    """Run the import as `who`, audited as `admin:import`; returns the summary. An empty
    `binding.session` takes the session of the run's own entry; `workers` processes do the
    lines' own work (bulk/pool.py).

    Raises:
        ToolError: UNAUTHORIZED without `maintain`; STORE_UNAVAILABLE and the like when the
            run stops (committed batches stay).
        ConfigurationError: the file cannot be read.
    """
    # Imported here, not at the top: building the parser must stay cheap (cli/main.py).
    from engram_memory.admin.maintenance import run_authorized
    from engram_memory.bulk.importer import Importer
    from engram_memory.core.call_audit import ToolOutcome

    total = _count_lines(path)

    def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
        bound = binding if binding.session else replace(binding, session=ctx.invocation.session)
        importer = Importer(services, bound, _progress)
        importer.run(numbered_lines(path), total, batch, workers)
        summary: dict[str, JsonValue] = {"lines": total, **dict(sorted(importer.counts.items()))}
        return ToolOutcome.succeeded(summary, audit)

    output = run_authorized(services, who, "import", "maintain", act)
    _sign_checkpoint(services)
    return output


def _sign_checkpoint(services: Services) -> None:
    """With a checkpoint key configured, sign and keep the heads the run left (reason
    `import`): the next start re-derives the audit trail from this checkpoint instead of the
    newest MAX_ENTRIES entries (core/startup_audit.py), so a large import does not slow the
    start that follows it.

    Raises:
        StoreUnavailable: the checkpoint could not be kept (the import itself is committed).
    """
    from engram_memory.core.checkpoints import keep_checkpoint, take_checkpoint

    key = services.checkpoint_key
    if key is None:
        return
    with services.database.reading() as tx:
        document = take_checkpoint(tx, key, services.clock_ms())
    with services.database.transaction() as tx:
        keep_checkpoint(tx, document, "import")


def run(args: argparse.Namespace) -> int:
    from engram_memory.admin.maintenance import Operator
    from engram_memory.bulk.importer import ImportBinding
    from engram_memory.contract.exceptions import ToolError
    from engram_memory.server.app import open_service

    if args.batch < 1:
        raise ConfigurationError("--batch must be at least 1")
    if args.workers < 1:
        raise ConfigurationError("--workers must be at least 1")
    path = Path(args.file)
    if not path.is_file():
        raise ConfigurationError(f"import file {path} does not exist")
    config = config_from_flags(args)
    who = Operator(args.tenant, args.workspace, args.operator)
    binding = ImportBinding(
        tenant=args.tenant,
        workspace=args.workspace,
        principal=args.principal,
        purpose_ref=args.purpose,
        session="",  # the run's own: see import_file
    )
    try:
        # A running server holds the store: opening it fails with a one-line message (exit 2).
        with open_service(config) as service:
            services = service.services
            # Running the import is the operator's opt-in to memory for this scope.
            services.settings = replace(services.settings, host_memory_enabled=True)
            # Nothing searches in this process: the in-memory search index (and each
            # record's semantic vector, ~half a line's time) would be built for nothing.
            # The lexical rows still go into the store; `serve` loads them, and re-embeds
            # every record, when it opens (core/search_index.py).
            services.database.index_commits.follow(None)
            services.search_index = None
            output = import_file(services, who, binding, path, args.batch, args.workers)
    except ToolError as error:
        print(json.dumps({"ok": False, "code": error.code.name}), file=sys.stdout)
        return 1
    except KeyboardInterrupt:
        # The open batch rolled back; every committed one replays on the rerun.
        print("engram-memory: import interrupted; rerun the same file to resume", file=sys.stderr)
        return 1
    print(json.dumps({"ok": True, "value": output}, indent=2))
    return 0
