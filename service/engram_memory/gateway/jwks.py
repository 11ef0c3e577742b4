"""The identity provider's signing keys (its JWKS), cached, for the HTTP gateway's verifier.

A token names its key by `kid`. A kid already known is answered from memory without I/O; an
unknown kid refetches the JWKS (a key rotation at the IdP), but at most once per cooldown,
so a storm of tokens with invented kids costs the IdP one request per cooldown, not one per
token. A failed fetch starts the cooldown too. While the IdP cannot be reached the keys of
the last good fetch stay in use (an IdP outage must not lock every user out); with no good
fetch yet there is nothing to verify with, and every token is refused `jwks_unavailable`.

The fetch itself is PyJWT's (`PyJWKClient.fetch_data`: http(s) only, no redirects, bounded
by a timeout), run in a worker thread so the event loop never waits on the IdP.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import jwt

from engram_memory.contract.exceptions import JwksUnavailable, UnknownKey

DEFAULT_LIFESPAN_S = 300.0
DEFAULT_COOLDOWN_S = 30.0
DEFAULT_FETCH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SigningKey:
    """A public key of the JWKS and the algorithm the IdP pinned it to (`alg`), if it did."""

    key: Any
    alg: str | None


class JwksCache:
    """The signing keys of one JWKS URL, by kid (keys marked `use: enc` are left out)."""

    def __init__(
        self,
        url: str,
        *,
        lifespan_s: float = DEFAULT_LIFESPAN_S,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        timeout_s: float = DEFAULT_FETCH_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # PyJWKClient only fetches here; its own caches are off because ours decides when.
        self._client = jwt.PyJWKClient(
            url, cache_jwk_set=False, cache_keys=False, timeout=timeout_s
        )
        self._lifespan_s, self._cooldown_s, self._clock = lifespan_s, cooldown_s, clock
        self._keys: Mapping[str, SigningKey] | None = None
        self._fetched_at = -float("inf")
        self._attempted_at = -float("inf")
        self._lock = threading.Lock()

    async def key(self, kid: str) -> SigningKey:
        """The signing key named `kid`.

        Raises:
            UnknownKey: no such key in the JWKS.
            JwksUnavailable: the JWKS could not be fetched and none is cached.
        """
        keys = self._keys
        if keys is not None and not self._stale():
            # The common cases need no thread and no lock: a known kid, and (in a storm of
            # invented ones) an unknown kid while a refetch is not yet allowed.
            if kid in keys:
                return keys[kid]
            if not self._may_fetch():
                raise UnknownKey
        return await anyio.to_thread.run_sync(self._key_after_fetch, kid)

    def _stale(self) -> bool:
        return self._clock() - self._fetched_at >= self._lifespan_s

    def _may_fetch(self) -> bool:
        return self._clock() - self._attempted_at >= self._cooldown_s

    def _key_after_fetch(self, kid: str) -> SigningKey:
        # One fetch at a time: requests waiting here see the result of the one before them.
        with self._lock:
            if (self._keys is None or self._stale() or kid not in self._keys) and self._may_fetch():
                self._fetch()
            if self._keys is None:
                raise JwksUnavailable
            found = self._keys.get(kid)
            if found is None:
                raise UnknownKey
            return found

    def _fetch(self) -> None:
        self._attempted_at = self._clock()
        try:
            data = self._client.fetch_data()
            key_set = jwt.PyJWKSet.from_dict(data)
        except jwt.PyJWTError:
            # PyJWKClientConnectionError, a body that is not a JWKS, or no usable key: keep
            # what the last good fetch gave, if anything.
            return
        pinned = {
            jwk.get("kid"): jwk.get("alg")
            for jwk in data.get("keys", [])
            if isinstance(jwk, dict) and isinstance(jwk.get("alg"), str)
        }
        self._keys = {
            key.key_id: SigningKey(key.key, pinned.get(key.key_id))
            for key in key_set.keys
            if key.key_id and key.public_key_use in ("sig", None)
        }
        self._fetched_at = self._attempted_at
