"""Bearer tokens the HTTP gateway verified recently, so a client's next request on the same
token costs a hash lookup instead of a JWT parse and a signature check.

An entry is keyed by the token's SHA-256 (the token itself is not kept) and lives until the
token's own expiry (with the verifier's leeway) or `ttl_s` after it was verified, whichever
comes first: a key the IdP withdraws stops being honoured through the cache within `ttl_s`
of the JWKS refresh that drops it. Only fully accepted tokens are kept; a refused one is
judged (and audited) again each time. The cache is bounded; the oldest entries go first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

DEFAULT_TTL_S = 60.0
DEFAULT_CAPACITY = 4096

T = TypeVar("T")


class TokenCache(Generic[T]):
    """Verified tokens by digest (single event loop: no lock needed)."""

    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        capacity: int = DEFAULT_CAPACITY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ttl_s, self._capacity, self._clock = ttl_s, capacity, clock
        self._entries: OrderedDict[str, tuple[T, float]] = OrderedDict()

    def get(self, digest: str) -> T | None:
        """The verified value for `digest`, or None when absent or no longer valid."""
        entry = self._entries.get(digest)
        if entry is None:
            return None
        value, until = entry
        if self._clock() >= until:
            del self._entries[digest]
            return None
        return value

    def put(self, digest: str, value: T, expires_at: float) -> None:
        """Keep `value` until `expires_at` (epoch seconds) or the cache's own lifetime."""
        self._entries[digest] = (value, min(expires_at, self._clock() + self._ttl_s))
        self._entries.move_to_end(digest)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
