"""Start-up's key file scan on a large store (issue 23 item 7): what it costs a start, how
long it runs, and what it costs the calls served meanwhile.

Usage: python -m bench.key_scan [--files 100000] [--runs 3] [--probes 300] [--out DIR]

`--files` version 2 key files (crypto/keyfile.py, wrapped under one root key) are written
into a fresh key directory (256 shards, as the server lays them out; written without fsync,
which the scan does not care about). Then, per run:
- `start()`: what the server's start pays: launching the background scan (the start does
  not wait for it);
- `scan`: the whole background scan, authenticating every file (`KeyFileScan.run`);
- `sweep`: for scale, the synchronous key-directory sweep every start already runs before
  serving (crypto/key_hygiene.py, every file listed and kept as live);
- `probe idle` / `probe during scan`: one key file unwrapped in the main thread (a call's
  key read), `--probes` times, with nothing else running and while the scan runs: what
  the scan's share of the CPU and the GIL costs a call served meanwhile.
The machine load (as `uptime` shows it) is recorded before and after.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.report import RESULTS, machine_load, percentile, write_report
from engram_memory.crypto import keyfile
from engram_memory.crypto.key_hygiene import file_names, sweep_directory
from engram_memory.crypto.key_scan import KeyFileScan
from engram_memory.crypto.keys import RootKey, scope_tag
from engram_memory.crypto.keystore import KeyStore, name_digest
from engram_memory.crypto.sealing import new_data_key

SCOPE = "tenant:acme/workspace:support"


def _populate(keys: KeyStore, root: RootKey, files: int) -> list[tuple[str, str, bool]]:
    header = keyfile.KeyFileHeader(root.key_id, 0, scope_tag(SCOPE))
    items = []
    for index in range(files):
        item = f"mem_{index:08d}"
        path = keys.path_for(SCOPE, item)
        path.parent.mkdir(exist_ok=True, mode=0o700)
        path.write_bytes(keyfile.wrap(root, header, name_digest(SCOPE, item), new_data_key()))
        items.append((SCOPE, item, True))
    return items


def _probe(keys: KeyStore, root: RootKey, count: int) -> list[float]:
    samples = []
    for index in range(count):
        began = time.perf_counter()
        keys.load_item_key(root, SCOPE, f"mem_{index:08d}")
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    figures: dict[str, object] = {"load before": machine_load()}
    root = RootKey(os.urandom(32))
    rows: dict[str, list[float]] = {
        "start()": [],
        "scan": [],
        "sweep": [],
        "probe idle": [],
        "probe during scan": [],
    }
    with tempfile.TemporaryDirectory(prefix="engram-bench-keyscan-") as tmp:
        keys = KeyStore(Path(tmp) / "keys")
        print(f"writing {args.files} key files", file=sys.stderr, flush=True)
        items = _populate(keys, root, args.files)
        probes = min(args.probes, args.files)
        for run in range(args.runs):
            print(f"run {run + 1}/{args.runs}", file=sys.stderr, flush=True)
            began = time.perf_counter()
            sweep_directory(keys, file_names(items), grace_s=600.0, now_s=time.time())
            rows["sweep"].append((time.perf_counter() - began) * 1000)
            rows["probe idle"].extend(_probe(keys, root, probes))
            scan = KeyFileScan(keys, root)
            began = time.perf_counter()
            scan.start()
            rows["start()"].append((time.perf_counter() - began) * 1000)
            rows["probe during scan"].extend(_probe(keys, root, probes))
            scan.join()
            assert scan.report is not None
            assert scan.report.damaged == 0
            assert scan.report.files == args.files
            rows["scan"].append(scan.report.seconds * 1000)
        figures["files"] = args.files
        figures["scan rate"] = (
            f"{args.files / (percentile(rows['scan'], 0.5) / 1000):.0f} files/s (median run)"
        )
    figures["load after"] = machine_load()
    command = "python -m bench.key_scan " + " ".join(argv if argv is not None else sys.argv[1:])
    print(
        write_report(
            "key_scan",
            f"Start-up's key file scan on {args.files} key files",
            command.strip(),
            {
                "per run": {k: rows[k] for k in ("start()", "scan", "sweep")},
                "per call": {k: rows[k] for k in ("probe idle", "probe during scan")},
            },
            "ms",
            out=args.out,
            extra=figures,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
