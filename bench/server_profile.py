"""Where a served call's time goes: a py-spy profile of a server split into transport and tool.

Usage: .venv/bin/python -m bench.server_profile PROFILE CALLS [--rate HZ]

PROFILE is what `py-spy record --pid PID --gil --threads --format raw -r HZ -o PROFILE`
wrote while a load ran (e.g. `bench.http_concurrency` against `serve --transport http`), CALLS
the calls answered while it sampled. With `--gil` a sample names the thread holding the
interpreter lock, so the table is the Python time per call on the event loop (our transport
and the SDK's) and on the worker threads (the tool), in milliseconds; time in native code
that releases the lock (DuckDB, fsync) is not in it: compare the total with the server's
CPU per call that `bench.http_concurrency` reports. (py-spy is a bench tool: `pip install
py-spy` into the venv; it is not a dependency of the service.)
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

# The first matching row wins, so the more specific come first.
_LOOP = (
    ("envelope JCS text", ("envelope_json",)),
    ("SDK result serialization", ("ServerRunner._serialize", "serialize_server_result")),
    ("JSON gate (strict parse, SDK model check)", ("inspect_message", "sdk_accepts")),
    ("constant-error send, HTTP write", ("_ConstantErrorSend",)),
    ("socket read, HTTP parse (guarded h11)", ("_read_ready", "data_received")),
    ("worker-thread hop", ("run_sync", "_report_result", "CapacityLimiter")),
    ("SDK request handling", ("handle_modern_request", "ServerRunner", "on_call_tool")),
    ("ASGI layers (guard, drain, gate, Starlette)", ("run_asgi", "TransportGuard", "JsonGate")),
    ("stdio lines, SDK stdio streams", ("StdinLines", "stdin_reader", "stdout_writer")),
)
_WORKER = (
    ("audit entry", ("MemoryService._audit", "AuditGroupWriter")),
    ("policy", ("PolicyDecider", "opapywasm")),
    ("binding (invocation context)", ("MemoryService._bind",)),
)


def _row(thread: str, frames: list[str]) -> str:
    def has(names: tuple[str, ...]) -> bool:
        return any(name in frame for frame in frames for name in names)

    if "MainThread" in thread:
        return next((f"loop: {n}" for n, marks in _LOOP if has(marks)), "loop: other")
    if "worker" in thread.lower():
        found = next((f"worker: {n}" for n, marks in _WORKER if has(marks)), None)
        return found or "worker: tool body (store, search, crypto, JSON)"
    return "other thread: " + re.sub(r"^thread \(\d+\):? ?", "", thread)


def split(profile: Path) -> Counter[str]:
    rows: Counter[str] = Counter()
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        thread, *frames = stack.split(";")
        rows[_row(thread, frames)] += int(count)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("profile", type=Path)
    parser.add_argument("calls", type=float)
    parser.add_argument("--rate", type=float, default=250.0, help="py-spy's -r")
    args = parser.parse_args()
    rows = split(args.profile)
    total = sum(rows.values())
    per_call = 1000 / args.rate / args.calls
    print("| where (interpreter lock held) | share | ms/call |\n|---|---|---|")
    for name, samples in sorted(rows.items()):
        print(f"| {name} | {100 * samples / total:.1f} % | {samples * per_call:.2f} |")
    print(f"| total | 100 % | {total * per_call:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
