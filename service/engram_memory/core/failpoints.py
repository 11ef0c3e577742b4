"""Test-only failpoints: make the service misbehave on purpose, to prove clients cope.

- `drop_response_after_commit:<tool>`: after a mutating tool committed (event, idempotency
  result and audit entry are durable), the dispatcher answers `MUTATION_OUTCOME_UNKNOWN`
  instead of the result, as if the response had been lost on the way back (SPEC §6). The
  commit stands; a retry with the same key and arguments must then return the definitive
  committed result.
- `pause_before_commit:<tool>`: the call stops at its last check before its write
  transaction and waits (at most `PAUSE_LIMIT_S`) until the client cancels it, announcing
  the pause on the `engram_memory.core.failpoints` log. It proves that a cancellation arriving
  before commit leaves nothing written (`CANCELLED`, SPEC §1.8).
- Crash points: the server process SIGKILLs itself at a named point of a mutating call, so
  the fault suite can prove what a restart recovers (tests/faults/):
  `kill_after_key_write:<tool>` once a new item key file is durable, before the write
  transaction opens (capture, and admission on accept); `kill_after_staging:<tool>` once an
  accepted record's index rows are staged, before the accept transaction opens (admission,
  core/indexing.py; in `engram-memory import`, once a batch's rows are written inside its
  open transaction, before its COMMIT); `kill_after_commit:<tool>` right after the call's
  transaction committed, before any promised key destruction;
  `kill_during_destruction:<tool>` after the first of the call's promised key destructions
  is carried out and before the rest and the clearing of the promises (admission, withdraw,
  forget). The fired line is logged (and flushed) before the process dies.
  `kill_after_log_append:<tool>` (any tool, reads included) once a call's audit entry is
  durable in the call log and anchored, before it is answered (core/audit_writer.py).
  `kill_during_projection:<tool>` once a background projection (store/projector.py) holding
  an audit entry of `<tool>` wrote its rows, before its COMMIT;
  `kill_after_projection:<tool>` once such a projection committed, before the call log
  released anything (any tool, reads included: the entries of reads are what is projected).
  `pause_projection:<tool>` stops the background projector before it projects a batch
  holding an entry of `<tool>` (until a graceful stop, or `PAUSE_LIMIT_S`): what is
  acknowledged then stays in the call log only, as a busy writer would leave it.

- `ENGRAM_UNSAFE_PAUSE_OPENING=<file>`: the service's opening stops just before the store is
  opened and waits (at most `PAUSE_LIMIT_S`) until `<file>` exists, announcing the pause. It
  proves that `serve` answers `initialize` while its store is still opening, that a call
  arriving meanwhile waits, and that a failed opening answers no call (cli/serve.py).

A graceful stop releases every pause instead (`release_paused`: the call goes on to commit),
to prove that a stop lets a call in flight finish (stopping.py).

Each arming fires once and then disarms itself. Arm them in tests with `arm(name, tool)`, or
for a real server process with `ENGRAM_UNSAFE_FAILPOINTS=<name>:<tool>[,...]`, read once
when the service starts. Like everything that weakens a check they are named `Unsafe...` and
warn (a `UnsafeFailpointWarning` and a log line) whenever one is armed or fires: they must
never be set in production.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.contract.types import MUTATING_TOOLS, READ_TOOLS
from engram_memory.store.logged_calls import AFTER_COMMIT, BEFORE_BEGIN, BEFORE_COMMIT

ENV_VAR = "ENGRAM_UNSAFE_FAILPOINTS"
PAUSE_OPENING_ENV_VAR = "ENGRAM_UNSAFE_PAUSE_OPENING"
DROP_RESPONSE_AFTER_COMMIT = "drop_response_after_commit"
PAUSE_BEFORE_COMMIT = "pause_before_commit"
KILL_AFTER_KEY_WRITE = "kill_after_key_write"
KILL_AFTER_STAGING = "kill_after_staging"
KILL_AFTER_COMMIT = "kill_after_commit"
KILL_DURING_DESTRUCTION = "kill_during_destruction"
KILL_AFTER_LOG_APPEND = "kill_after_log_append"
KILL_DURING_PROJECTION = "kill_during_projection"
KILL_AFTER_PROJECTION = "kill_after_projection"
PAUSE_PROJECTION = "pause_projection"
KILL_POINTS = frozenset(
    {
        KILL_AFTER_KEY_WRITE,
        KILL_AFTER_STAGING,
        KILL_AFTER_COMMIT,
        KILL_DURING_DESTRUCTION,
        KILL_AFTER_LOG_APPEND,
        KILL_DURING_PROJECTION,
        KILL_AFTER_PROJECTION,
    }
)
# Armed for any tool: reads commit through the call log too.
_ANY_TOOL = frozenset(
    {KILL_AFTER_LOG_APPEND, KILL_DURING_PROJECTION, KILL_AFTER_PROJECTION, PAUSE_PROJECTION}
)
FAILPOINTS = (
    frozenset({DROP_RESPONSE_AFTER_COMMIT, PAUSE_BEFORE_COMMIT, PAUSE_PROJECTION}) | KILL_POINTS
)
PAUSE_LIMIT_S = 30.0

log = logging.getLogger("engram_memory.core.failpoints")


class UnsafeFailpointWarning(RuntimeWarning):
    """A test-only failpoint was armed or fired; never expected in production."""


class UnsafeFailpoints:
    """One-shot failpoints, shared by all calls of one service (thread-safe)."""

    def __init__(self) -> None:
        self._armed: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._released = threading.Event()

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> UnsafeFailpoints:
        """Failpoints armed by `ENGRAM_UNSAFE_FAILPOINTS` (none when unset or empty).

        The value is a comma-separated list of `<failpoint>:<tool>`; naming a pair twice
        arms it for two calls.

        Raises:
            ConfigurationError: an unknown failpoint or a tool that does not mutate.
        """
        failpoints = cls()
        text = (os.environ if env is None else env).get(ENV_VAR, "")
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, _, tool = item.partition(":")
            failpoints.arm(name, tool)
        return failpoints

    @property
    def armed(self) -> bool:
        with self._lock:
            return bool(+self._armed)

    def arm(self, name: str, tool: str) -> None:
        """Arm failpoint `name` for the next call of `tool` that reaches it.

        Raises:
            ConfigurationError: `name` is no failpoint or `tool` not a mutating tool.
        """
        if name not in FAILPOINTS:
            raise ConfigurationError(f"{ENV_VAR}: unknown failpoint {name!r}")
        if tool not in (READ_TOOLS | MUTATING_TOOLS if name in _ANY_TOOL else MUTATING_TOOLS):
            raise ConfigurationError(f"{name}: {tool!r} is not a tool it can be armed for")
        with self._lock:
            self._armed[(name, tool)] += 1
        message = f"UNSAFE failpoint armed: {name}:{tool} (test-only)"
        log.warning(message)
        warnings.warn(message, UnsafeFailpointWarning, stacklevel=2)

    def arm_drop_response_after_commit(self, tool: str) -> None:
        """Answer the next committed call of `tool` with MUTATION_OUTCOME_UNKNOWN."""
        self.arm(DROP_RESPONSE_AFTER_COMMIT, tool)

    def _fire(self, name: str, tool: str) -> bool:
        with self._lock:
            if self._armed[(name, tool)] <= 0:
                return False
            self._armed[(name, tool)] -= 1
        log.warning("UNSAFE failpoint fired: %s:%s", name, tool)
        return True

    def drop_response_after_commit(self, tool: str) -> bool:
        """True (once per arming) when the committed result of `tool` must be dropped."""
        return self._fire(DROP_RESPONSE_AFTER_COMMIT, tool)

    def release_paused(self) -> None:
        """End every pause now and from now on (a graceful stop began): calls go on."""
        self._released.set()

    def pause_before_commit(self, tool: str, cancellation: threading.Event | None) -> None:
        """If armed for `tool`, wait until `cancellation` is set (or the limit passes)."""
        if cancellation is None or not self._fire(PAUSE_BEFORE_COMMIT, tool):
            return
        log.warning("UNSAFE failpoint %s:%s paused until cancelled", PAUSE_BEFORE_COMMIT, tool)
        limit = time.monotonic() + PAUSE_LIMIT_S
        # Two events end the pause; a short poll keeps this test-only wait simple.
        while not self._released.is_set() and time.monotonic() < limit:
            if cancellation.wait(0.05):
                break
        cancelled = cancellation.is_set()
        log.warning(
            "UNSAFE failpoint %s:%s resumed, cancelled=%s", PAUSE_BEFORE_COMMIT, tool, cancelled
        )

    def kill_after_key_write(self, tool: str) -> None:
        """If armed for `tool`, SIGKILL this process (a new item key is durable, nothing
        committed)."""
        self._kill_if_armed(KILL_AFTER_KEY_WRITE, tool)

    def kill_after_staging(self, tool: str) -> None:
        """If armed for `tool`, SIGKILL this process (an accepted record's index rows are
        staged, its record row not committed)."""
        self._kill_if_armed(KILL_AFTER_STAGING, tool)

    def kill_after_commit(self, tool: str) -> None:
        """If armed for `tool`, SIGKILL this process (committed, no key destroyed yet)."""
        self._kill_if_armed(KILL_AFTER_COMMIT, tool)

    def kill_during_destruction(self, tool: str) -> None:
        """If armed for `tool`, SIGKILL this process (one promised key destroyed, the rest
        and the promises themselves not yet)."""
        self._kill_if_armed(KILL_DURING_DESTRUCTION, tool)

    def kill_after_log_append(self, tool: str) -> None:
        """If armed for `tool`, SIGKILL this process (the call's audit entry is durable in
        the call log, the call not answered)."""
        self._kill_if_armed(KILL_AFTER_LOG_APPEND, tool)

    def kill_during_projection(self, tool: str) -> None:
        """If armed for `tool`, SIGKILL this process (a background projection holding an
        entry of `tool` wrote its rows, its COMMIT not yet run)."""
        self._kill_if_armed(KILL_DURING_PROJECTION, tool)

    def kill_after_projection(self, tool: str) -> None:
        """If armed for `tool`, SIGKILL this process (a background projection holding an
        entry of `tool` committed; the call log released nothing yet)."""
        self._kill_if_armed(KILL_AFTER_PROJECTION, tool)

    def pause_projection(self, tool: str) -> None:
        """If armed for `tool`, hold the background projector here until a graceful stop
        (or `PAUSE_LIMIT_S`)."""
        if self._fire(PAUSE_PROJECTION, tool):
            log.warning("UNSAFE failpoint %s:%s paused the projector", PAUSE_PROJECTION, tool)
            self._released.wait(PAUSE_LIMIT_S)

    def projection_probe(self, point: str, tools: frozenset[str]) -> None:
        """The background projector's probe (store/logged_calls.py): the failpoint of
        `point`, for each tool whose entries the batch holds."""
        if not self.armed:
            return
        act = {
            BEFORE_BEGIN: self.pause_projection,
            BEFORE_COMMIT: self.kill_during_projection,
            AFTER_COMMIT: self.kill_after_projection,
        }[point]
        for tool in sorted(tools):
            act(tool)

    def _kill_if_armed(self, name: str, tool: str) -> None:
        if not self._fire(name, tool):
            return
        # SIGKILL skips every handler and buffer: flush the fired line first, so a test can
        # tell this crash from any other.
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def pause_opening(env: Mapping[str, str] | None = None) -> None:
    """If `ENGRAM_UNSAFE_PAUSE_OPENING` names a file, wait until it exists (at most
    `PAUSE_LIMIT_S`): a store that is slow to open, on demand (tests/cli)."""
    value = (os.environ if env is None else env).get(PAUSE_OPENING_ENV_VAR, "")
    if not value:
        return
    release = Path(value)
    message = f"UNSAFE failpoint armed: {PAUSE_OPENING_ENV_VAR} (test-only)"
    log.warning(message)
    warnings.warn(message, UnsafeFailpointWarning, stacklevel=2)
    limit = time.monotonic() + PAUSE_LIMIT_S
    # The test releases the pause by creating the file; a short poll keeps this simple.
    while not release.exists() and time.monotonic() < limit:
        time.sleep(0.02)
    log.warning("UNSAFE failpoint %s resumed", PAUSE_OPENING_ENV_VAR)
