"""`engram-memory policy replay --bundle NEW --from T1 --to T2`: what a candidate bundle
would have decided about the decisions recorded in a period (admin/policy_replay.py), per
tenant and domain, before it is rolled out. The store is opened read-only and never written.

Exit codes, as `policy diff`: 0 nothing would change, 1 some decisions would change, 2 bad
usage or an unusable bundle or store.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_memory.contract.exceptions import ConfigurationError

EXIT_CHANGED = 1


def add_parser(policy_sub: Any) -> argparse.ArgumentParser:
    replay: argparse.ArgumentParser = policy_sub.add_parser(
        "replay",
        help="re-decide the recorded decisions of a period under a candidate bundle",
        description="Re-decides every decision input kept in the period (see "
        "ENGRAM_DECISION_INPUT_RETENTION_DAYS) under the candidate bundle and reports, per "
        "tenant and domain, what would change. Opens the store read-only: run it on a "
        "stopped service's data directory or a backup copy.",
    )
    replay.add_argument(
        "--bundle",
        required=True,
        type=Path,
        help="the candidate: a bundle directory, or its bundle.tar.gz (a lone tarball needs "
        "--engine opa)",
    )
    replay.add_argument("--from", dest="start", required=True, help="ISO 8601, inclusive")
    replay.add_argument("--to", dest="end", required=True, help="ISO 8601, exclusive")
    replay.add_argument(
        "--store", type=Path, help="the data directory (default $ENGRAM_DATA_DIR, else ./.engram)"
    )
    replay.add_argument("--tenant", help="only this tenant's decisions")
    replay.add_argument("--format", choices=("text", "json"), default="text")
    replay.add_argument(
        "--engine",
        choices=("embedded", "opa"),
        default="embedded",
        help="embedded Wasm (default) or a private OPA server serving the candidate",
    )
    replay.add_argument("--opa", help="OPA binary for --engine opa (default $ENGRAM_OPA_BIN, ...)")
    replay.add_argument(
        "--sample", type=int, default=20, help="affected decisions listed per tenant and domain"
    )
    return replay


def _epoch_ms(text: str, flag: str) -> int:
    """Raises: ConfigurationError: not an ISO 8601 date or instant."""
    from engram_memory.admin.audit_queries import parse_timestamp
    from engram_memory.contract.exceptions import QueryUsageError

    try:
        moment = parse_timestamp(text)
    except QueryUsageError as exc:
        raise ConfigurationError(f"{flag}: {exc}") from None
    return int(moment.replace(tzinfo=UTC).timestamp() * 1000)


def _instant(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def run(args: argparse.Namespace) -> int:
    """Replay and print the report; see the module docstring for the exit codes.

    Raises:
        ConfigurationError: a bad instant or range, an unusable bundle, engine or store.
    """
    from engram_memory.admin.policy_replay import candidate_engine, replay

    from_ms, to_ms = _epoch_ms(args.start, "--from"), _epoch_ms(args.end, "--to")
    if to_ms <= from_ms:
        raise ConfigurationError("the range is empty: --to (exclusive) must be after --from")
    if not 0 <= args.sample <= 10_000:
        raise ConfigurationError("--sample must be 0 to 10000")
    store = args.store or Path(os.environ.get("ENGRAM_DATA_DIR") or ".engram")
    if not store.is_dir():
        raise ConfigurationError(f"--store {store} is not a directory")
    with candidate_engine(args.bundle, args.engine, args.opa) as (engine, revision):
        report = replay(
            store,
            engine,
            revision,
            (from_ms, to_ms),
            tenant=args.tenant,
            sample_size=args.sample,
            progress=lambda line: print(line, file=sys.stderr),
        )
    if args.format == "json":
        print(json.dumps(report.as_json(), indent=2, ensure_ascii=False))
    else:
        _print_text(report.as_json())
    return EXIT_CHANGED if report.flipped else 0


def _print_text(report: dict[str, Any]) -> None:
    print(
        f"replay under {report['bundle_revision']} ({report['engine']}), "
        f"{_instant(report['from_ms'])} to {_instant(report['to_ms'])}"
    )
    print(
        f"{report['replayed']} decisions replayed, {report['flipped']} would change, "
        f"{report['missing']} not replayable (input pruned or not kept)"
    )
    if not report["groups"]:
        return
    print(f"\n{'tenant':<16} {'domain':<15} replayed unchanged flipped missing")
    for g in report["groups"]:
        print(
            f"{g['tenant']:<16} {g['domain']:<15} {g['replayed']:>8} {g['unchanged']:>9} "
            f"{g['flipped']:>7} {g['missing']:>7}"
        )
    flips = [(g, f) for g in report["groups"] for f in g["flips"]]
    if flips:
        width = max(len("change (old → new)"), *(len(f["change"]) for _, f in flips))
        print(f"\n{'tenant':<16} {'domain':<15} {'change (old → new)':<{width}} count")
        for g, f in flips:
            print(f"{g['tenant']:<16} {g['domain']:<15} {f['change']:<{width}} {f['count']:>5}")
    for g in report["groups"]:
        if g["sample"]:
            print(f"\naffected decisions, {g['tenant']} {g['domain']} (at most a sample):")
            for item in g["sample"]:
                print(f"  {item['decision_id']}  {item['audit_id']}  {item['change']}")
