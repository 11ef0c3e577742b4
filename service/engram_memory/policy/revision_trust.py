"""Which bundle revisions the service accepts decisions from, and the identity each binds.

An engine reports the revision it evaluated with (OPA: the provenance block); the decider
asks a `RevisionTrust` for the `BundleIdentity` that revision stands for, and a revision the
trust does not vouch for is `PolicyStale` (retriable, SPEC §5).

- `PinnedRevision`: exactly one revision, the bundle directory the service started with
  (embedded, opa-spawn, and an OPA URL without a bundle service: today's behaviour).
- `SignedRevisionTrust`: an OPA fleet that pulls signed bundles from a bundle service. A
  revision OPA reports that the service has not verified yet is fetched from that same
  bundle service, its signature checked with the configured key (`policy.signing`), and it
  is trusted only if the verified bundle's revision is the reported one; receipts then bind
  the content digest of the verified bundle. A fetch or verification failure backs off
  (1 s doubling to 60 s): until the next attempt is due, decisions with an unverified
  revision are `PolicyStale` at once, so a broken rollout never costs a fetch per call.

Every change of the revision in use is handed to a listener (the audit trail,
core/revision_audit.py) before the new revision decides anything; a change the listener
cannot record is not made (fail closed: the decision is `PolicyStale`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from engram_memory.contract.exceptions import (
    BundleFetchFailed,
    ConfigurationError,
    EngramError,
    PolicyStale,
)
from engram_memory.policy.engine import BundleIdentity

log = logging.getLogger("engram_memory.policy")

# Told the previous and the new identity; True once the change is durably recorded.
RevisionListener = Callable[[BundleIdentity, BundleIdentity], bool]

MIN_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
# A policy bundle is small (Rego + compiled YAML); anything larger is refused unread.
MAX_BUNDLE_BYTES = 32 * 1024 * 1024
FETCH_TIMEOUT_SECONDS = 5.0


class RevisionTrust(Protocol):
    """The revisions decisions may come from."""

    @property
    def current(self) -> BundleIdentity:
        """The identity in use: of the last decision, or the startup bundle before any."""
        ...

    def identity_for(self, revision: str) -> BundleIdentity:
        """The verified identity of `revision`, which becomes the one in use.

        Raises:
            PolicyStale: the revision is not (yet) trusted, or its change is not recorded.
        """
        ...

    def follow(self, listener: RevisionListener | None) -> None:
        """Hand every later change of the revision in use to `listener`."""
        ...


class PinnedRevision:
    """Exactly one revision: the bundle the service was started with."""

    def __init__(self, identity: BundleIdentity) -> None:
        self._identity = identity

    @property
    def current(self) -> BundleIdentity:
        return self._identity

    def identity_for(self, revision: str) -> BundleIdentity:
        """Raises: PolicyStale: any other revision."""
        if revision != self._identity.revision:
            raise PolicyStale("engine serves another bundle revision")
        return self._identity

    def follow(self, listener: RevisionListener | None) -> None:
        """A pinned revision never changes: nothing to hand on."""


class SignedRevisionTrust:
    """Any revision whose bundle, fetched from the bundle service, carries a valid signature.

    `fetch` returns the published `bundle.tar.gz` bytes; `verify` checks its signature and
    returns its identity (raising on anything unsigned, tampered or signed by another key).
    """

    def __init__(
        self,
        startup: BundleIdentity,
        *,
        fetch: Callable[[], bytes],
        verify: Callable[[bytes], BundleIdentity],
        startup_trusted: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._current = startup
        self._trusted: dict[str, BundleIdentity] = (
            {startup.revision: startup} if startup_trusted else {}
        )
        self._fetch = fetch
        self._verify = verify
        self._clock = clock
        self._listener: RevisionListener | None = None
        self._fetching = threading.Lock()  # one fetch at a time; others wait for its result
        self._switching = threading.Lock()
        self._next_fetch_at = 0.0
        self._backoff = MIN_BACKOFF_SECONDS

    @property
    def current(self) -> BundleIdentity:
        return self._current

    def follow(self, listener: RevisionListener | None) -> None:
        self._listener = listener

    def identity_for(self, revision: str) -> BundleIdentity:
        """Raises: PolicyStale: unverified (fetch failed or backing off, unsigned, wrong
        key, another revision published), or the change could not be recorded."""
        identity = self._trusted.get(revision) or self._verify_published(revision)
        if identity != self._current:
            self._switch_to(identity)
        return identity

    def _verify_published(self, revision: str) -> BundleIdentity:
        with self._fetching:
            known = self._trusted.get(revision)
            if known is not None:  # verified by the fetch this thread waited for
                return known
            if self._clock() < self._next_fetch_at:
                raise PolicyStale("engine serves a revision not verified yet (backing off)")
            try:
                published = self._verify(self._fetch())
            except Exception as exc:  # any failure leaves the revision untrusted
                # Our own errors carry constant text; anything else is named by type only.
                why = f": {exc}" if isinstance(exc, EngramError | BundleFetchFailed) else ""
                self._back_off(f"bundle not verified ({type(exc).__name__}{why})")
                raise PolicyStale("engine serves a revision that could not be verified") from exc
            # Signed by our key: trustworthy whichever revision it is (OPA may catch up).
            self._trusted[published.revision] = published
            if published.revision != revision:
                self._back_off("the bundle service publishes another revision than OPA serves")
                raise PolicyStale("engine serves a revision the bundle service does not publish")
            self._backoff, self._next_fetch_at = MIN_BACKOFF_SECONDS, 0.0
            log.info("policy revision verified revision=%s", published.revision)
            return published

    def _back_off(self, why: str) -> None:
        log.warning("policy revision not trusted: %s; next fetch in %.0f s", why, self._backoff)
        self._next_fetch_at = self._clock() + self._backoff
        self._backoff = min(self._backoff * 2, MAX_BACKOFF_SECONDS)

    def _switch_to(self, identity: BundleIdentity) -> None:
        with self._switching:
            previous = self._current
            if identity == previous:
                return
            listener = self._listener
            if listener is not None and not listener(previous, identity):
                raise PolicyStale("policy revision change could not be recorded")
            self._current = identity
            log.info(
                "policy revision in use previous=%s revision=%s",
                previous.revision,
                identity.revision,
            )


@dataclass(slots=True)
class _CallRevision:
    """The identity the first decision of the running call bound (None before it)."""

    identity: BundleIdentity | None = None


# Set for the duration of one call on the thread that runs it (`one_revision_per_call`).
_CALL_REVISION: ContextVar[_CallRevision | None] = ContextVar("engram_call_revision", default=None)


@contextlib.contextmanager
def one_revision_per_call() -> Iterator[None]:
    """Within the block, `bind_call_revision` holds every decision to the first one's
    revision (SPEC §5: a call never mixes two policies)."""
    token = _CALL_REVISION.set(_CallRevision())
    try:
        yield
    finally:
        _CALL_REVISION.reset(token)


def bind_call_revision(identity: BundleIdentity, path: str) -> None:
    """Record (first decision) or check (later ones) the running call's revision.

    Raises:
        PolicyStale: an earlier decision of this call came from another revision.
    """
    call = _CALL_REVISION.get()
    if call is None:
        return
    if call.identity is None:
        call.identity = identity
    elif call.identity != identity:
        raise PolicyStale(f"{path}: the call's decisions straddle a policy rollout")


def call_revision() -> BundleIdentity | None:
    """The revision the running call's decisions bound, if any yet."""
    call = _CALL_REVISION.get()
    return None if call is None else call.identity


def bundle_service_url(text: str) -> str:
    """`text` checked as the http(s) URL of the published `bundle.tar.gz`.

    Raises:
        ConfigurationError: not an http(s) URL with a host.
    """
    parts = urlsplit(text)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ConfigurationError(
            "ENGRAM_BUNDLE_SERVICE must be the http(s) URL of the published bundle.tar.gz"
        )
    return text


def fetch_bundle(url: str, *, timeout_seconds: float = FETCH_TIMEOUT_SECONDS) -> bytes:
    """GET the published bundle at `url` (at most `MAX_BUNDLE_BYTES`).

    Raises:
        BundleFetchFailed: unreachable, timed out, a status other than 200, or too large.
    """
    request = urllib.request.Request(url, headers={"Accept": "application/gzip"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_seconds) as response:  # noqa: S310
            if response.status != 200:
                raise BundleFetchFailed(f"bundle service answered {response.status}")
            body: bytes = response.read(MAX_BUNDLE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise BundleFetchFailed(f"bundle service answered {exc.code}") from exc
    except OSError as exc:  # URLError, timeouts, resets
        if isinstance(exc, BundleFetchFailed):
            raise
        raise BundleFetchFailed(f"bundle service unreachable ({type(exc).__name__})") from exc
    if len(body) > MAX_BUNDLE_BYTES:
        raise BundleFetchFailed("published bundle is larger than the limit")
    return body
