"""How many audit entries a storm of refusals may write: first N, then one counted summary.

Refusals are counted per key (stream + peer or principal + reason or outcome + tool). A key's
window opens at its first refusal and lasts `interval_ms`; the first `burst` refusals of a
window are audited one by one, every further one only counted; when the window ends, one
summary entry records how many were counted and when the first and last of them came. So a
key writes at most `burst + 1` entries per window, whatever the rate, and the counts are
exact: individual entries + summary occurrences = refusals.

This module only counts (pure, clock passed in); core/refusal_stream.py writes the entries.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

DEFAULT_BURST = 10
DEFAULT_INTERVAL_MS = 60_000
# Open windows kept at most; a storm spread over more keys (peers, principals) is counted
# under one coarse key per stream, reason and tool, so memory and the bound stay finite.
MAX_OPEN_KEYS = 10_000
COARSE_PEER = "*"

FloodKey = tuple[str, str, str, str]  # stream, peer or principal ref, reason or outcome, tool


@dataclass(frozen=True)
class FloodLimits:
    """`burst` individual entries per key and window of `interval_ms`, then one summary."""

    burst: int = DEFAULT_BURST
    interval_ms: int = DEFAULT_INTERVAL_MS

    def __post_init__(self) -> None:
        if self.burst < 0 or self.interval_ms <= 0:
            raise ValueError("burst must be >= 0 and the interval positive")


@dataclass
class Counted:
    """The refusals of one window beyond its burst: what its summary entry records."""

    key: FloodKey
    occurrences: int
    first_ms: int
    last_ms: int
    # What the summary needs besides the counts (the first counted refusal's facts).
    template: object
    # (audit id, kept-until ms) of counted calls bound by a token: claimed with the summary.
    audit_ids: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class _Window:
    ends_ms: int
    individual: int = 0
    counted: Counted | None = None


class FloodCounter:
    """Thread-safe windows per key."""

    def __init__(self, limits: FloodLimits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._windows: dict[FloodKey, _Window] = {}
        # Summaries of windows that ended and were replaced before a flush took them.
        self._orphans: list[Counted] = []

    def admit(
        self,
        key: FloodKey,
        now_ms: int,
        template: object,
        audit_id: tuple[str, int] | None = None,
    ) -> bool:
        """Count one refusal; True if it is to be audited individually, False if it was
        counted into its window's summary (with `template` the first time, and `audit_id`)."""
        with self._lock:
            key = self._bounded(key, now_ms)
            window = self._windows.get(key)
            if window is None or now_ms >= window.ends_ms:
                if window is not None and window.counted is not None:
                    # An ended window's summary is still owed: keep it under its own key.
                    self._orphans.append(window.counted)
                window = self._windows[key] = _Window(ends_ms=now_ms + self.limits.interval_ms)
            if window.individual < self.limits.burst:
                window.individual += 1
                return True
            if window.counted is None:
                window.counted = Counted(key, 0, now_ms, now_ms, template)
            counted = window.counted
            counted.occurrences += 1
            counted.last_ms = max(counted.last_ms, now_ms)
            if audit_id is not None:
                counted.audit_ids.append(audit_id)
            return False

    def due(self, now_ms: int) -> list[Counted]:
        """Take the summaries of the windows that ended by `now_ms` (and forget those)."""
        with self._lock:
            ended = [key for key, window in self._windows.items() if now_ms >= window.ends_ms]
            taken = self._take_orphans()
            for key in ended:
                counted = self._windows.pop(key).counted
                if counted is not None:
                    taken.append(counted)
            return taken

    def drain(self) -> list[Counted]:
        """Take every summary owed, ended or not (at shutdown)."""
        with self._lock:
            taken = self._take_orphans()
            taken.extend(w.counted for w in self._windows.values() if w.counted is not None)
            self._windows.clear()
            return taken

    def next_end_ms(self) -> int | None:
        """When the earliest window holding counted refusals ends (None: nothing owed)."""
        with self._lock:
            if self._orphans:
                return 0
            ends = [w.ends_ms for w in self._windows.values() if w.counted is not None]
            return min(ends) if ends else None

    def _take_orphans(self) -> list[Counted]:
        taken, self._orphans = self._orphans, []
        return taken

    def _bounded(self, key: FloodKey, now_ms: int) -> FloodKey:
        if key in self._windows or len(self._windows) < MAX_OPEN_KEYS:
            return key
        # Windows that ended without counting anything owe nothing: make room first.
        for stale in [k for k, w in self._windows.items() if now_ms >= w.ends_ms]:
            window = self._windows.pop(stale)
            if window.counted is not None:
                self._orphans.append(window.counted)
        if len(self._windows) < MAX_OPEN_KEYS:
            return key
        return (key[0], COARSE_PEER, key[2], key[3])
