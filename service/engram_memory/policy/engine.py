"""What every policy engine offers, and the two ways a policy decision can fail.

The decider talks to an engine only through `PolicyEngine.evaluate`, so the production OPA
server and the embedded Wasm evaluator are interchangeable (and differentially tested). An
engine reports the bundle revision it evaluated with; the decider, not the engine, compares
it with the revision the service expects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")  # fullmatch only


@dataclass(frozen=True, slots=True)
class BundleIdentity:
    """Which policy bundle decides: its revision label and its content digest.

    `revision` is `<label>+<digest>`, so the revision an engine reports proves which content
    it serves; `digest` is the sha256 over the bundle's canonical file list.
    """

    revision: str
    digest: str

    def __post_init__(self) -> None:
        if not DIGEST_PATTERN.fullmatch(self.digest):
            raise ValueError("bundle digest must be sha256:<64 hex>")
        if (
            not self.revision.endswith("+" + self.digest)
            or len(self.revision) <= len(self.digest) + 1
        ):
            raise ValueError("bundle revision must be <label>+<digest>")

    @property
    def label(self) -> str:
        return self.revision[: -len(self.digest) - 1]


@dataclass(frozen=True, slots=True)
class EngineAnswer:
    """The entrypoint's value as the engine returned it (unvalidated) and the bundle
    revision the engine itself reports having evaluated with."""

    result: object
    revision: str
    # The engine's own serialization of `result` when it remembers answers (None: it does
    # not): equal texts are equal results, so the decider reuses what it derived from one.
    # Not part of the answer's value: a remembered answer equals a fresh one.
    result_text: str | None = field(default=None, compare=False)


class PolicyEngine(Protocol):
    """Evaluates `data.<path>` of the loaded bundle for one input."""

    @property
    def engine_id(self) -> str: ...

    @property
    def engine_version(self) -> str: ...

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        """Evaluate the entrypoint `path` (e.g. `engram/authz/decision`).

        Raises:
            PolicyUnavailable: the engine cannot produce a defined result.
        """
        ...

    def close(self) -> None: ...
