"""The MCP Inspector's CLI as a test driver: the pinned npm package `scripts/lib.sh`'s
`ensure_inspector` installs (scripts/test calls it), run as a subprocess the way a person runs
it from a shell, its JSON output parsed.

A missing Inspector fails the test that needs it (never a skip): CI installs it, and a run
without it would silently prove nothing about stock clients.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN_ENV = "ENGRAM_INSPECTOR_BIN"
# The CLI's own exit codes (its `EXIT_CODES`): what a script acts on.
EXIT_OK = 0
EXIT_AUTH_REQUIRED = 3
EXIT_TOOL_ERROR = 5


def pinned_version() -> str:
    """The Inspector version `scripts/lib.sh` pins (one pin for the installer and the tests)."""
    match = re.search(r"^INSPECTOR_VERSION=(\S+)", (ROOT / "scripts/lib.sh").read_text(), re.M)
    assert match is not None, "scripts/lib.sh no longer pins INSPECTOR_VERSION"
    return match.group(1)


def inspector_bin() -> Path:
    """$ENGRAM_INSPECTOR_BIN, else the pinned version in the tool cache.

    Raises:
        pytest.fail.Exception: neither is an executable (the test fails, never skips).
    """
    configured = os.environ.get(BIN_ENV)
    cache = Path(os.environ.get("ENGRAM_TOOL_CACHE", Path.home() / ".cache/engram-memory/tools"))
    candidate = (
        Path(configured)
        if configured
        else cache / f"inspector-{pinned_version()}/node_modules/.bin/mcp-inspector"
    )
    if not os.access(candidate, os.X_OK):
        pytest.fail(
            f"MCP Inspector CLI not found at {candidate}: run `source scripts/lib.sh && "
            f"ensure_inspector` (scripts/test does) or set {BIN_ENV}",
            pytrace=False,
        )
    return candidate


@dataclass(frozen=True)
class InspectorRun:
    """One CLI run: its exit code, the `result` of the JSON it printed on stdout (None when it
    printed none) and the error envelope on stderr (`{"code": ..., "message": ...}`, None when
    there is none)."""

    exit_code: int
    output: Any
    error: dict[str, Any] | None

    def tool_envelope(self) -> dict[str, Any]:
        """The engram-memory envelope of a `tools/call` result (its structured content); the
        CLI's exit code must agree with it (a failure envelope is an `isError` result)."""
        assert isinstance(self.output, dict), (self.exit_code, self.error)
        envelope: dict[str, Any] = self.output["structuredContent"]
        assert self.output["isError"] is (envelope["ok"] is False)
        assert self.exit_code == (EXIT_OK if envelope["ok"] else EXIT_TOOL_ERROR)
        return envelope


def run_inspector(args: Sequence[str], *, home: Path, timeout_s: float = 120) -> InspectorRun:
    """`mcp-inspector --cli --format json --quiet ARGS` with HOME at `home`, so the
    Inspector's catalog, OAuth store and secrets file stay in the test's directory.

    Raises:
        subprocess.TimeoutExpired: the CLI did not finish within `timeout_s`.
    """
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "NO_COLOR": "1"}
    completed = subprocess.run(
        [str(inspector_bin()), "--cli", "--format", "json", "--quiet", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )
    stdout = completed.stdout.decode("utf-8", "replace").strip()
    return InspectorRun(
        completed.returncode,
        json.loads(stdout)["result"] if stdout else None,
        _error_envelope(completed.stderr.decode("utf-8", "replace")),
    )


def _error_envelope(stderr: str) -> dict[str, Any] | None:
    # The CLI ends a failed run with one JSON line `{"error": {...}}` on stderr.
    for line in reversed(stderr.splitlines()):
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            error: dict[str, Any] = parsed["error"]
            return error
    return None


def tool_call_args(tool: str, arguments: dict[str, Any]) -> list[str]:
    """The CLI flags of one `tools/call`; nested objects (capture's `payload`) need
    `--tool-args-json`, whose values are passed verbatim."""
    return [
        "--method",
        "tools/call",
        "--tool-name",
        tool,
        "--tool-args-json",
        json.dumps(arguments),
    ]
