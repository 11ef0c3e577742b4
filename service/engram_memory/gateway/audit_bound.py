"""How many lines the gateway audit log may write in a storm: per key, the first `burst` of a
window one by one, then one counted summary when the window ends.

Every gateway audit line is fsynced, and each kind of line can be provoked by the client: a
purpose it may not use, duplicate argument keys, a confirmation it declines (or answers
itself), a bad token, a malformed line, an upstream it keeps failing. Unbounded, one stdio
client wrote 1,000 lines in 8 s (issue 23, finding 3). So, as the store's refusal streams do
(core/flood_bound.py), every line is counted under a key (event, reason, principal, tool): a
window opens at the key's first line and lasts `interval_s`; its first `burst` lines are
written, every further one is only counted. When the window ends (noticed at the next line
of any key, by a timer while a summary is owed, and when the log closes) one summary line
records `summary_count`, `first_at` and `last_at`. Written lines plus summary counts equal
the lines asked for, exactly; a key writes at most `burst + 1` lines per window.

A counted line still has an audit id to hand back (an envelope's `auditId`): the id of the
summary its window will write, allocated when the window starts counting.

This module only counts (clock passed in); audit_log.py writes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

DEFAULT_BURST = 10
DEFAULT_INTERVAL_S = 60.0
# Open windows kept at most; a storm spread over more principals is counted under one coarse
# key per event, reason and tool, so memory and the bound stay finite.
MAX_OPEN_KEYS = 10_000
COARSE = "*"

BoundKey = tuple[str, str, str, str]  # event, reason, principal ref ("" none), tool ("" none)


@dataclass
class Counted:
    """The lines of one window beyond its burst: what its summary line records.

    `fields` are the entry fields every counted line shared (the caller when it was always
    the same one, the tool), `detail` the detail items they all shared.
    """

    key: BoundKey
    audit_id: str
    first_s: float
    fields: dict[str, object]
    detail: dict[str, str]
    count: int = 0
    last_s: float = 0.0

    def summary_detail(self) -> dict[str, str]:
        return {
            **self.detail,
            "summary_count": str(self.count),
            "first_at": iso_ms(self.first_s),
            "last_at": iso_ms(self.last_s),
        }


@dataclass
class _Window:
    ends_s: float
    written: int = 0
    counted: Counted | None = None


@dataclass
class AuditBound:
    """Windows per key; not thread-safe (the audit log calls it under its own lock)."""

    burst: int = DEFAULT_BURST
    interval_s: float = DEFAULT_INTERVAL_S
    clock: Callable[[], float] = time.time
    _windows: dict[BoundKey, _Window] = field(default_factory=dict)
    # Summaries of windows that ended and were replaced before anyone took them.
    _owed: list[Counted] = field(default_factory=list)
    # No window ends before this: `due`, asked at every line, looks at none until then.
    _first_end_s: float = float("inf")

    def __post_init__(self) -> None:
        if self.burst < 0 or not self.interval_s > 0:
            raise ValueError("burst must be >= 0 and the interval positive")

    def admit(
        self, key: BoundKey, fields: Mapping[str, object], detail: Mapping[str, str]
    ) -> str | None:
        """None when this line is to be written; else the audit id of the summary it was
        counted into (`fields` and `detail` are the line's, to keep what all shared)."""
        now = self.clock()
        key = self._bounded(key, now)
        window = self._windows.get(key)
        if window is None or now >= window.ends_s:
            if window is not None and window.counted is not None:
                self._owed.append(window.counted)
            window = self._windows[key] = _Window(ends_s=now + self.interval_s)
            self._first_end_s = min(self._first_end_s, window.ends_s)
        if window.written < self.burst:
            window.written += 1
            return None
        counted = window.counted
        if counted is None:
            audit_id = f"audit:gw-{uuid.uuid4().hex}"
            counted = Counted(key, audit_id, now, dict(fields), dict(detail))
            window.counted = counted
        else:
            counted.fields = {k: v for k, v in counted.fields.items() if fields.get(k) == v}
            counted.detail = {k: v for k, v in counted.detail.items() if detail.get(k) == v}
        counted.count += 1
        counted.last_s = now
        return counted.audit_id

    def due(self) -> list[Counted]:
        """Take the summaries of the windows that have ended (and forget those windows)."""
        now = self.clock()
        taken, self._owed = self._owed, []
        if now < self._first_end_s:
            return taken
        for key in [k for k, w in self._windows.items() if now >= w.ends_s]:
            counted = self._windows.pop(key).counted
            if counted is not None:
                taken.append(counted)
        self._first_end_s = min((w.ends_s for w in self._windows.values()), default=float("inf"))
        return taken

    def drain(self) -> list[Counted]:
        """Take every summary owed, ended or not (when the log closes)."""
        taken, self._owed = self._owed, []
        taken.extend(w.counted for w in self._windows.values() if w.counted is not None)
        self._windows.clear()
        self._first_end_s = float("inf")
        return taken

    def owe(self, summaries: list[Counted]) -> None:
        """Keep summaries whose lines could not be written, to write first next time."""
        self._owed[:0] = summaries

    def next_end_s(self) -> float | None:
        """When the earliest window holding counted lines ends (None: nothing owed)."""
        if self._owed:
            return self.clock()
        ends = [w.ends_s for w in self._windows.values() if w.counted is not None]
        return min(ends) if ends else None

    def _bounded(self, key: BoundKey, now: float) -> BoundKey:
        if key in self._windows or len(self._windows) < MAX_OPEN_KEYS:
            return key
        for stale in [k for k, w in self._windows.items() if now >= w.ends_s]:
            window = self._windows.pop(stale)
            if window.counted is not None:
                self._owed.append(window.counted)
        if len(self._windows) < MAX_OPEN_KEYS:
            return key
        return (key[0], key[1], COARSE, key[3])


def iso_ms(epoch_s: float) -> str:
    moment = datetime.fromtimestamp(epoch_s, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
