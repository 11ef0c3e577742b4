"""Rate limits from policy (SPEC §12): token buckets counted in the serving process.

Policy decides which limits apply to a call (`engram.authz` returns the workspace's rules
that select the caller and the tool); this module only counts. Each (scope, principal, rule)
has a bucket holding up to `calls` tokens that refills at `calls` per `per_ms`, so bursts up
to the limit pass and a steady rate above it is refused with RATE_LIMITED. A call takes a
token from every applicable bucket or from none.

Counts live in memory: a restart forgets them, which errs on the side of availability for at
most one window. The store admits one writing process, so there is no other process to share
counts with.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from engram_memory.policy.decider import RateLimit

# Buckets of idle callers are dropped once this many exist (a full bucket is the same as
# none at all, so only those are dropped).
_MAX_BUCKETS = 100_000

BucketKey = tuple[str, str, str, int, int]  # scope, principal, rule name, calls, per_ms


@dataclass
class _Bucket:
    tokens: float
    updated_ms: int


class RateLimiter:
    """Thread-safe token buckets keyed by scope, principal and limit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[BucketKey, _Bucket] = {}

    def admit(
        self, scope_ref: str, principal: str, limits: Sequence[RateLimit], now_ms: int
    ) -> str | None:
        """Take one token from each limit's bucket, or none at all.

        Returns the name of the first exhausted limit (nothing taken), else None.
        """
        if not limits:
            return None
        with self._lock:
            buckets = []
            for limit in limits:
                bucket = self._refilled((scope_ref, principal, *_identity(limit)), limit, now_ms)
                if bucket.tokens < 1.0:
                    return limit.name
                buckets.append(bucket)
            for bucket in buckets:
                bucket.tokens -= 1.0
            return None

    def _refilled(self, key: BucketKey, limit: RateLimit, now_ms: int) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= _MAX_BUCKETS:
                self._drop_full(now_ms)
            bucket = self._buckets[key] = _Bucket(float(limit.calls), now_ms)
            return bucket
        elapsed = max(0, now_ms - bucket.updated_ms)  # a clock step back refills nothing
        rate = limit.calls / limit.per_ms
        bucket.tokens = min(float(limit.calls), bucket.tokens + elapsed * rate)
        bucket.updated_ms = max(bucket.updated_ms, now_ms)
        return bucket

    def _drop_full(self, now_ms: int) -> None:
        for key, bucket in list(self._buckets.items()):
            calls, per_ms = key[3], key[4]
            elapsed = max(0, now_ms - bucket.updated_ms)
            if bucket.tokens + elapsed * calls / per_ms >= calls:
                del self._buckets[key]


def _identity(limit: RateLimit) -> tuple[str, int, int]:
    # A changed rule (same name, other numbers) starts a fresh bucket.
    return (limit.name, limit.calls, limit.per_ms)
