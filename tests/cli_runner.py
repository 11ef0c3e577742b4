"""Run `engram-memory` commands in this process, as `python -m engram_memory.cli` would.

Issue 19: each CLI subprocess costs 1.5-2.5 s of CPU importing the package, and most CLI
tests only check an exit code and the output. `run_cli` calls `main(argv)` here with the
environment, streams, logging and umask the command would have had in its own process, and
puts every piece of process state it touches back afterwards. Tests about signals, kills,
the umask of files a process creates, commands running concurrently with the test, or the
exit status a shell sees keep a real process.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping

from engram_memory._internal.log_lines import EscapingFormatter
from engram_memory.cli.main import main

# os.environ, the umask, sys.stdout/stderr and the root logger are process-global.
_LOCK = threading.Lock()


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _root_logging_to(stream: io.StringIO) -> Iterator[None]:
    """Root handlers bound to `stream`: `main()`'s `logging.basicConfig` is a no-op once the
    root logger has a handler, so without this the first call's stream would keep every log
    line of later calls. Level and the `mcp` logger level are restored too."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    mcp = logging.getLogger("mcp")
    saved_mcp_level = mcp.level
    handler = logging.StreamHandler(stream)
    handler.setFormatter(EscapingFormatter("%(levelname)s %(name)s: %(message)s"))
    root.handlers = [handler]
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)
        mcp.setLevel(saved_mcp_level)


@contextlib.contextmanager
def _stdin(text: str) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        yield
    finally:
        sys.stdin = saved


def _exit_code(exc: SystemExit) -> int:
    """The status `python -m` would exit with for `raise SystemExit(code)`."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def run_cli(
    env: Mapping[str, str], *argv: str, input: str = ""
) -> subprocess.CompletedProcess[str]:
    """`main(argv)` in this process with `os.environ` exactly `env`, stdin `input` (empty, as
    a closed pipe would be) and stdout/stderr captured; everything restored on return."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with _LOCK:
        umask = os.umask(0o022)
        os.umask(umask)
        try:
            with (
                _environment(env),
                _stdin(input),
                contextlib.redirect_stdout(stdout),
                contextlib.redirect_stderr(stderr),
                _root_logging_to(stderr),
            ):
                try:
                    code = main(list(argv))
                except SystemExit as exc:
                    code = _exit_code(exc)
        finally:
            os.umask(umask)
    return subprocess.CompletedProcess(list(argv), code, stdout.getvalue(), stderr.getvalue())
