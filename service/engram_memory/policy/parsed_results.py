"""What the decider derives from an entrypoint's result, remembered per result text.

An engine that remembers its answers (policy/embedded.py) hands each one back with the text
it keeps it as (`EngineAnswer.result_text`); equal texts are equal results. Most calls ask the
same few questions and get the same few answers, so the strict parse of a result (pydantic)
and its RFC 8785 bytes (for the receipt's `result_digest` and the kept decision) are derived
once per distinct answer instead of once per decision. Exact, not a cache that can go stale:
the key is the answer itself. Bounded: emptied when full (a handful of answers per binding).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from engram_memory.contract.canonical import canonical_json, normalize

_M = TypeVar("_M", bound=BaseModel)

MAX_REMEMBERED = 2048


class ParsedResults:
    """(validated model, RFC 8785 bytes) of results, by (path, model, result text)."""

    def __init__(self, entries: int = MAX_REMEMBERED) -> None:
        self._entries = entries
        self._derived: dict[tuple[str, type[BaseModel], str], tuple[BaseModel, bytes]] = {}
        self._lock = threading.Lock()

    def derive(
        self,
        path: str,
        model: type[_M],
        result: Mapping[str, Any],
        result_text: str | None,
        validate: Callable[[Mapping[str, Any]], _M],
    ) -> tuple[_M, bytes]:
        """The parsed result and its canonical bytes (`validate` parses; the models are frozen,
        so one parsed value may serve many decisions).

        Raises:
            ValidationError / ValueError / TypeError: the result does not parse or serialize
                (nothing is remembered then).
        """
        key = None if result_text is None else (path, model, result_text)
        if key is not None:
            with self._lock:
                known = self._derived.get(key)
            if known is not None:
                parsed, result_json = known
                assert isinstance(parsed, model)
                return parsed, result_json
        parsed_now = validate(result)
        result_json_now = canonical_json(normalize(dict(result)))
        if key is not None:
            with self._lock:
                if len(self._derived) >= self._entries:
                    self._derived.clear()
                self._derived[key] = (parsed_now, result_json_now)
        return parsed_now, result_json_now

    def __len__(self) -> int:
        with self._lock:
            return len(self._derived)
