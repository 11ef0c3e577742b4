"""Runs a `python -m bench.X` entry point as an operator runs it: a subprocess from the
repository root, its exit code checked (stderr's tail shown when it fails)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(module: str, *args: str, timeout: float = 600) -> str:
    """The entry point's standard output; fails the test on a non-zero exit."""
    command = [sys.executable, "-m", f"bench.{module}", *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
