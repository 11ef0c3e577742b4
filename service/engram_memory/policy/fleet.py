"""The policy the service decides with, for every engine: `open_policy_engine`'s engine and
pinned identity, or, for an OPA fleet, the same engine with a trust that follows it.

An OPA fleet is an OPA URL (`ENGRAM_POLICY`) plus the bundle service its nodes pull from
(`ENGRAM_BUNDLE_SERVICE`, the URL of the published `bundle.tar.gz`) plus the bundle
verification key: the startup bundle is verified as always (its signature included), and
any revision OPA later reports is trusted once the bundle the bundle service publishes is
verified to be that revision, signed by that key (policy/revision_trust.py).

Whatever the OPA mode, the revision label OPA reports is not taken on its word: the content
OPA serves is read back and must be the bundle that revision names (served_content.py), at
start (a mismatch refuses to start) and at least every 30 s per revision in use (a mismatch
is `POLICY_STALE`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from engram_memory.contract.exceptions import (
    ConfigurationError,
    ContentMismatch,
    PolicyUnavailable,
)
from engram_memory.policy.bundle import BUNDLE_FILE, DEFAULT_BUNDLE_DIR, tarball_files
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import BundleIdentity, PolicyEngine
from engram_memory.policy.factory import open_policy_engine
from engram_memory.policy.revision_trust import (
    PinnedRevision,
    RevisionTrust,
    SignedRevisionTrust,
    fetch_bundle,
)
from engram_memory.policy.served_content import (
    ServedContentTrust,
    expected_served_digest,
)
from engram_memory.policy.signing import VerificationKey, verify_signed_tarball

if TYPE_CHECKING:
    from engram_memory.policy.opa_server import OpaServerEngine


def _expected(tar_bytes: bytes, where: str) -> tuple[str, tuple[str, ...]]:
    return expected_served_digest(tarball_files(tar_bytes, where))


def _is_opa_server(engine: PolicyEngine) -> TypeGuard[OpaServerEngine]:
    """Whether `engine` is an OPA server, without loading the OPA REST client (and its HTTP
    stack) for the embedded engine, which is what `serve` runs by default."""
    if isinstance(engine, EmbeddedWasmEngine):
        return False
    from engram_memory.policy.opa_server import OpaServerEngine

    return isinstance(engine, OpaServerEngine)


def _served_check(
    engine: PolicyEngine, trust: RevisionTrust, expected: dict[str, tuple[str, tuple[str, ...]]]
) -> RevisionTrust:
    """`trust`, proving also that an OPA server serves the bundle each revision names
    (served_content.py); the embedded engine runs the verified bytes themselves."""
    if not _is_opa_server(engine):
        return trust
    return ServedContentTrust(trust, engine, expected)


def _prove_at_start(trust: RevisionTrust, revision: str, url: str) -> None:
    """Refuse to start when the OPA server serves other content than the startup bundle.

    Raises:
        ConfigurationError: it does (one line).
    """
    if not isinstance(trust, ServedContentTrust):
        return
    try:
        trust.prove(revision)
    except ContentMismatch:
        raise ConfigurationError(
            f"the OPA server at {url} serves other policies or data than bundle revision "
            f"{revision}; receipts would name a bundle it does not run"
        ) from None
    except PolicyUnavailable:
        pass  # not answering yet: every decision proves it before it counts


@contextlib.contextmanager
def open_policy(
    policy: str,
    bundle_dir: Path | str | None,
    *,
    verification_key: VerificationKey | None = None,
    bundle_service: str | None = None,
) -> Iterator[tuple[PolicyEngine, BundleIdentity | RevisionTrust]]:
    """Open the engine `policy` names and what decides which revisions it may answer from:
    the startup bundle's identity (embedded), a pinned revision whose served content an OPA
    server must prove, or for an OPA fleet (`bundle_service`) a `SignedRevisionTrust`
    starting from it, each revision's content proven too.

    Raises:
        ConfigurationError: a bundle service without an OPA URL or without a verification
            key; an OPA server serving other content than the startup bundle; and
            everything `open_policy_engine` raises.
    """
    directory = Path(bundle_dir) if bundle_dir is not None else DEFAULT_BUNDLE_DIR
    if bundle_service is None:
        with open_policy_engine(policy, bundle_dir, verification_key=verification_key) as (
            engine,
            identity,
        ):
            if not _is_opa_server(engine):
                yield engine, identity
                return
            expected = {identity.revision: _expected(_tarball(directory), str(directory))}
            trust = _served_check(engine, PinnedRevision(identity), expected)
            _prove_at_start(trust, identity.revision, engine.url)
            yield engine, trust
        return
    if not policy.startswith(("http://", "https://")):
        raise ConfigurationError("ENGRAM_BUNDLE_SERVICE needs ENGRAM_POLICY set to an OPA URL")
    if verification_key is None:
        raise ConfigurationError(
            "ENGRAM_BUNDLE_SERVICE needs ENGRAM_BUNDLE_VERIFICATION_KEY and ENGRAM_BUNDLE_KEY_ID"
        )
    key = verification_key
    with open_policy_engine(policy, bundle_dir, verification_key=key) as (engine, startup):
        expected = {startup.revision: _expected(_tarball(directory), str(directory))}

        def verify(tar_bytes: bytes) -> BundleIdentity:
            identity = verify_signed_tarball(tar_bytes, key)
            # What OPA must serve for this revision: the very bytes just verified.
            expected[identity.revision] = _expected(tar_bytes, "published bundle")
            return identity

        # The startup bundle's signature was checked by open_policy_engine: trusted at once.
        signed = SignedRevisionTrust(
            startup,
            fetch=lambda: fetch_bundle(bundle_service),
            verify=verify,
            startup_trusted=True,
        )
        # No proof at start: the fleet may already serve a later revision (each decision
        # proves the revision it came from).
        yield engine, _served_check(engine, signed, expected)


def _tarball(directory: Path) -> bytes:
    """Raises: ConfigurationError: the (already verified) tarball cannot be read again."""
    try:
        return (directory / BUNDLE_FILE).read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"{directory / BUNDLE_FILE}: cannot read bundle") from exc
