"""The very first `engram-memory demo` (fresh work directory) prints no warning it does not
explain (issue 24, finding 7): the keys it makes include the checkpoint key it serves with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_the_first_demo_run_succeeds_without_a_warning(tmp_path: Path) -> None:
    demo = subprocess.run(
        [sys.executable, "-m", "engram_memory.cli", "demo", "--workdir", str(tmp_path / "w")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    warnings = [line for line in demo.stderr.splitlines() if line.startswith("WARNING")]
    assert warnings == []
    assert (tmp_path / "w" / "secrets" / "checkpoint.pem").is_file()
