"""The policy the service decides with, for every engine: `open_policy_engine`'s engine and
pinned identity, or, for an OPA fleet, the same engine with a trust that follows it.

An OPA fleet is an OPA URL (`ENGRAM_POLICY`) plus the bundle service its nodes pull from
(`ENGRAM_BUNDLE_SERVICE`, the URL of the published `bundle.tar.gz`) plus the bundle
verification key: the startup bundle is verified as always (its signature included), and
any revision OPA later reports is trusted once the bundle the bundle service publishes is
verified to be that revision, signed by that key (policy/revision_trust.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.policy.engine import BundleIdentity, PolicyEngine
from engram_memory.policy.factory import open_policy_engine
from engram_memory.policy.revision_trust import RevisionTrust, SignedRevisionTrust, fetch_bundle
from engram_memory.policy.signing import VerificationKey, verify_signed_tarball


@contextlib.contextmanager
def open_policy(
    policy: str,
    bundle_dir: Path | str | None,
    *,
    verification_key: VerificationKey | None = None,
    bundle_service: str | None = None,
) -> Iterator[tuple[PolicyEngine, BundleIdentity | RevisionTrust]]:
    """Open the engine `policy` names and what decides which revisions it may answer from:
    the startup bundle's identity, or for an OPA fleet (`bundle_service`) a
    `SignedRevisionTrust` starting from it.

    Raises:
        ConfigurationError: a bundle service without an OPA URL or without a verification
            key; and everything `open_policy_engine` raises.
    """
    if bundle_service is None:
        with open_policy_engine(policy, bundle_dir, verification_key=verification_key) as opened:
            yield opened
        return
    if not policy.startswith(("http://", "https://")):
        raise ConfigurationError("ENGRAM_BUNDLE_SERVICE needs ENGRAM_POLICY set to an OPA URL")
    if verification_key is None:
        raise ConfigurationError(
            "ENGRAM_BUNDLE_SERVICE needs ENGRAM_BUNDLE_VERIFICATION_KEY and ENGRAM_BUNDLE_KEY_ID"
        )
    key = verification_key
    with open_policy_engine(policy, bundle_dir, verification_key=key) as (engine, startup):
        # The startup bundle's signature was checked by open_policy_engine: trusted at once.
        trust = SignedRevisionTrust(
            startup,
            fetch=lambda: fetch_bundle(bundle_service),
            verify=lambda tar_bytes: verify_signed_tarball(tar_bytes, key),
            startup_trusted=True,
        )
        yield engine, trust
