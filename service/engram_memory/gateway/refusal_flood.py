"""How many `token_refused` entries a storm of bad tokens may write: per reason, the first
`burst` of a window one by one, then one counted summary when the window ends.

Anyone can send the gateway bearer tokens, and each audit entry is fsynced: unbounded, a
flood would cost a disk write per request and grow the log without limit. As the store's
own refusal streams do (core/flood_bound.py), refusals are counted per reason: a window
opens at a reason's first refusal and lasts `interval_s`; its first `burst` refusals are
audited individually, every further one only counted; once the window has ended (noticed at
the next refusal of any reason, or when the gateway stops) one summary entry records the
count and when the first and last counted refusal came. Individual entries plus summary
counts equal the refusals, exactly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

DEFAULT_BURST = 10
DEFAULT_INTERVAL_S = 60.0


@dataclass
class _Window:
    opened: float
    written: int = 0
    counted: int = 0
    first_counted: float = 0.0
    last_counted: float = 0.0


@dataclass(frozen=True)
class Summary:
    """One summary entry to write: `count` refusals of `reason` not written one by one."""

    reason: str
    detail: Mapping[str, str]


@dataclass
class RefusalFlood:
    """Decides which refusals are written; not thread-safe (the event loop's alone)."""

    burst: int = DEFAULT_BURST
    interval_s: float = DEFAULT_INTERVAL_S
    clock: Callable[[], float] = time.time
    _windows: dict[str, _Window] = field(default_factory=dict)

    def admit(self, reason: str) -> tuple[bool, list[Summary]]:
        """Whether this refusal gets its own entry, and the summaries of ended windows
        (to write first, so the log stays in time order)."""
        now = self.clock()
        ended = self.ended(now)
        window = self._windows.setdefault(reason, _Window(opened=now))
        if window.written < self.burst:
            window.written += 1
            return True, ended
        if window.counted == 0:
            window.first_counted = now
        window.counted += 1
        window.last_counted = now
        return False, ended

    def ended(self, now: float | None = None) -> list[Summary]:
        """Close every window past its interval (all of them when `now` is None: at stop)."""
        summaries: list[Summary] = []
        for reason, window in list(self._windows.items()):
            if now is not None and now - window.opened < self.interval_s:
                continue
            del self._windows[reason]
            if window.counted:
                summaries.append(
                    Summary(
                        reason,
                        {
                            "summary_count": str(window.counted),
                            "first_at": _iso(window.first_counted),
                            "last_at": _iso(window.last_counted),
                        },
                    )
                )
        return summaries


def _iso(epoch_s: float) -> str:
    moment = datetime.fromtimestamp(epoch_s, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
