"""Test-only failpoints: make the service misbehave on purpose, to prove clients cope.

One failpoint exists: `drop_response_after_commit:<tool>`. After a mutating tool committed
(event, idempotency result and audit entry are durable), the dispatcher answers
`MUTATION_OUTCOME_UNKNOWN` instead of the result, as if the response had been lost on the
way back (SPEC §6). The commit stands; a retry with the same key and arguments must then
return the definitive committed result.

Each arming fires once and then disarms itself, so "fail, then retry" needs no second step.
Arm it in tests with `UnsafeFailpoints.arm_drop_response_after_commit(tool)`, or for a real
server process with `ENGRAM_UNSAFE_FAILPOINTS=drop_response_after_commit:<tool>[,...]`,
read once when the service starts. Like everything that weakens a check it is named
`Unsafe...` and warns (a `UnsafeFailpointWarning` and a log line) whenever it is armed or
fires: it must never be set in production.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections import Counter
from collections.abc import Mapping

from engram_memory.contract.errors import ConfigurationError

ENV_VAR = "ENGRAM_UNSAFE_FAILPOINTS"
DROP_RESPONSE_AFTER_COMMIT = "drop_response_after_commit"
MUTATING_TOOLS = frozenset(
    {
        "engram_memory_capture",
        "engram_memory_request_admission",
        "engram_memory_withdraw",
        "engram_memory_forget",
    }
)

log = logging.getLogger("engram_memory.failpoints")


class UnsafeFailpointWarning(RuntimeWarning):
    """A test-only failpoint was armed or fired; never expected in production."""


class UnsafeFailpoints:
    """One-shot failpoints, shared by all calls of one service (thread-safe)."""

    def __init__(self) -> None:
        self._drop_after_commit: Counter[str] = Counter()
        self._lock = threading.Lock()

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> UnsafeFailpoints:
        """Failpoints armed by `ENGRAM_UNSAFE_FAILPOINTS` (none when unset or empty).

        The value is a comma-separated list of `drop_response_after_commit:<tool>`; naming
        a tool twice arms it for two calls.

        Raises:
            ConfigurationError: an unknown failpoint or a tool that does not mutate.
        """
        failpoints = cls()
        text = (os.environ if env is None else env).get(ENV_VAR, "")
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, _, tool = item.partition(":")
            if name != DROP_RESPONSE_AFTER_COMMIT:
                raise ConfigurationError(f"{ENV_VAR}: unknown failpoint {name!r}")
            failpoints.arm_drop_response_after_commit(tool)
        return failpoints

    @property
    def armed(self) -> bool:
        with self._lock:
            return bool(+self._drop_after_commit)

    def arm_drop_response_after_commit(self, tool: str) -> None:
        """Answer the next committed call of `tool` with MUTATION_OUTCOME_UNKNOWN.

        Raises:
            ConfigurationError: `tool` is not one of the four mutating tools.
        """
        if tool not in MUTATING_TOOLS:
            raise ConfigurationError(
                f"{DROP_RESPONSE_AFTER_COMMIT}: {tool!r} is not a mutating tool"
            )
        with self._lock:
            self._drop_after_commit[tool] += 1
        message = f"UNSAFE failpoint armed: {DROP_RESPONSE_AFTER_COMMIT}:{tool} (test-only)"
        log.warning(message)
        warnings.warn(message, UnsafeFailpointWarning, stacklevel=2)

    def drop_response_after_commit(self, tool: str) -> bool:
        """True (once per arming) when the committed result of `tool` must be dropped."""
        with self._lock:
            if self._drop_after_commit[tool] <= 0:
                return False
            self._drop_after_commit[tool] -= 1
        log.warning("UNSAFE failpoint fired: %s:%s", DROP_RESPONSE_AFTER_COMMIT, tool)
        return True
