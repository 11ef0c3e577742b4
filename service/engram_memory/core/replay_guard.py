"""An invocation token is single-use: its `audit_id` binds at most one request.

SPEC §1.7 refuses a replayed context with -32603. Tokens live up to 300 s, so the service
remembers every audit id it bound until that id's token expires (plus the clock skew it
tolerates), and refuses a second binding of it. Two parts keep that rule:

- this in-memory guard, claimed atomically when a request binds: of two concurrent requests
  with one token exactly one passes, before either has written anything;
- `used_audit_ids` in the store (store/audit.py), written in the transaction of the entry
  the audit id names, which seeds the guard when the service opens: a restart within a
  token's lifetime does not make it usable again.

Expired ids are dropped from memory as new ones are claimed and from the table when the
service opens (and when a refusal summary is flushed, core/refusal_stream.py).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterable

from engram_memory.host.tokens import CLOCK_SKEW_S

# A token verified at `exp - 1 s` by a service whose clock runs behind the host's is still
# valid a little after `exp` by the host's clock: keep ids that much longer.
_KEEP_AFTER_EXPIRY_MS = CLOCK_SKEW_S * 1000


class AuditIdGuard:
    """Thread-safe set of audit ids bound by tokens that have not expired yet."""

    def __init__(self, used: Iterable[tuple[str, int]] = ()) -> None:
        """`used`: (audit id, kept-until ms) pairs, as `used_audit_ids` holds them."""
        self._lock = threading.Lock()
        self._until: dict[str, int] = {}
        # (kept-until ms, audit id), to drop expired ids without scanning them all.
        self._expiries: list[tuple[int, str]] = []
        for audit_id, keep_until_ms in used:
            self._remember(audit_id, keep_until_ms)

    def claim(self, audit_id: str, keep_until_ms: int, now_ms: int) -> bool:
        """Bind `audit_id` until `keep_until_ms` (`kept_until_ms` of its token's expiry);
        False if a token not yet expired bound it already (a replay): nothing changes then."""
        with self._lock:
            self._drop_expired(now_ms)
            if audit_id in self._until:
                return False
            self._remember(audit_id, keep_until_ms)
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._until)

    def _remember(self, audit_id: str, keep_until: int) -> None:
        if keep_until > self._until.get(audit_id, -1):
            self._until[audit_id] = keep_until
            heapq.heappush(self._expiries, (keep_until, audit_id))

    def _drop_expired(self, now_ms: int) -> None:
        while self._expiries and self._expiries[0][0] <= now_ms:
            keep_until, audit_id = heapq.heappop(self._expiries)
            if self._until.get(audit_id) == keep_until:
                del self._until[audit_id]


def kept_until_ms(expires_at_ms: int) -> int:
    """Until when an audit id whose token expires at `expires_at_ms` stays bound."""
    return expires_at_ms + _KEEP_AFTER_EXPIRY_MS
