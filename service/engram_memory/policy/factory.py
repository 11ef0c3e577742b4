"""Choosing the engine from configuration (`ENGRAM_POLICY`).

- `embedded`: the bundle's `policy.wasm` in-process (default; no OPA binary needed);
- `opa-spawn`: a private `opa run --server` on 127.0.0.1 serving the bundle, stopped with us;
- `http(s)://host:port`: an OPA server run by the operator, expected to serve the bundle;
  one that does not answer at startup is logged as a warning (calls fail closed until it
  answers).

The expected identity comes from the verified bundle directory, so a server serving
anything else answers `POLICY_STALE`; except for an OPA fleet with a bundle service
(`bundle_service` and a verification key): then any revision the bundle service publishes
signed by that key is trusted once verified (policy/revision_trust.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from engram_memory.contract.errors import ConfigurationError
from engram_memory.policy.bundle import BUNDLE_FILE, DEFAULT_BUNDLE_DIR, verify_bundle
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import BundleIdentity, PolicyEngine
from engram_memory.policy.opa_server import OpaServerEngine, start_opa_server
from engram_memory.policy.revision_trust import RevisionTrust, SignedRevisionTrust, fetch_bundle
from engram_memory.policy.signing import (
    BundleSignatureInvalid,
    load_verification_key,
    verify_signed_tarball,
)

log = logging.getLogger("engram_memory.policy")

EMBEDDED = "embedded"
OPA_SPAWN = "opa-spawn"


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


@contextlib.contextmanager
def open_policy_engine(
    policy: str = EMBEDDED,
    bundle_dir: Path | str | None = None,
    *,
    opa_bin: Path | str | None = None,
    timeout_seconds: float = 2.0,
    bundle_service: str | None = None,
    verification_key: Path | None = None,
    key_id: str | None = None,
) -> Iterator[tuple[PolicyEngine, BundleIdentity | RevisionTrust]]:
    """Open the engine `policy` names and the bundle identity decisions must carry (or,
    for an OPA fleet, the trust that vouches for revisions); close (and stop a spawned
    OPA) on exit.

    Raises:
        BundleError: the bundle does not match its lock.
        OpaBinaryNotFound, OpaServerStartError: `opa-spawn` cannot start OPA.
        ConfigurationError: `policy` is none of the forms above; a bundle service without
            an OPA URL or without a verification key and key id; an unreadable key.
    """
    directory = Path(bundle_dir) if bundle_dir is not None else DEFAULT_BUNDLE_DIR
    engine: PolicyEngine
    if policy == EMBEDDED:
        embedded = EmbeddedWasmEngine(directory)
        try:
            yield embedded, embedded.identity
        finally:
            embedded.close()
        return
    identity = verify_bundle(directory)
    if bundle_service is not None and not policy.startswith(("http://", "https://")):
        raise ConfigurationError("ENGRAM_BUNDLE_SERVICE needs ENGRAM_POLICY set to an OPA URL")
    if policy == OPA_SPAWN:
        with start_opa_server(directory / BUNDLE_FILE, opa_bin) as url:
            engine = OpaServerEngine(url, timeout_seconds=timeout_seconds)
            try:
                yield engine, identity
            finally:
                engine.close()
        return
    if policy.startswith(("http://", "https://")):
        engine = OpaServerEngine(policy, timeout_seconds=timeout_seconds)
        if not engine.answers_health():
            # Not fatal: OPA may come up later; until then every call is POLICY_UNAVAILABLE.
            log.warning(
                "the OPA server at %s does not answer; calls fail with POLICY_UNAVAILABLE "
                "until it does",
                _without_credentials(policy),
            )
        trust: BundleIdentity | RevisionTrust = identity
        if bundle_service is not None:
            trust = _fleet_trust(directory, identity, bundle_service, verification_key, key_id)
        try:
            yield engine, trust
        finally:
            engine.close()
        return
    raise ConfigurationError(f"policy engine must be {EMBEDDED}, {OPA_SPAWN} or an OPA URL")


def _fleet_trust(
    directory: Path,
    identity: BundleIdentity,
    bundle_service: str,
    verification_key: Path | None,
    key_id: str | None,
) -> SignedRevisionTrust:
    """Trust any revision the bundle service publishes signed by the configured key; the
    startup bundle is trusted at once only if it is signed by that key too.

    Raises:
        ConfigurationError: no verification key or key id; the key cannot be loaded.
    """
    if verification_key is None or not key_id:
        raise ConfigurationError(
            "ENGRAM_BUNDLE_SERVICE needs ENGRAM_BUNDLE_VERIFICATION_KEY and ENGRAM_BUNDLE_KEY_ID"
        )
    key = load_verification_key(verification_key, key_id)
    try:
        signed = verify_signed_tarball((directory / BUNDLE_FILE).read_bytes(), key)
        startup_trusted = signed == identity
    except (BundleSignatureInvalid, OSError):
        startup_trusted = False
    if not startup_trusted:
        log.warning(
            "the startup bundle is not signed by key %s; decisions wait for a revision "
            "verified from the bundle service",
            key_id,
        )
    return SignedRevisionTrust(
        identity,
        fetch=lambda: fetch_bundle(bundle_service),
        verify=lambda tar_bytes: verify_signed_tarball(tar_bytes, key),
        startup_trusted=startup_trusted,
    )
