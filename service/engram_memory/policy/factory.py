"""Choosing the engine from configuration (`ENGRAM_POLICY`).

- `embedded`: the bundle's `policy.wasm` in-process (default; no OPA binary needed);
- `opa-spawn`: a private `opa run --server` on 127.0.0.1 serving the bundle, stopped with us;
- `http(s)://host:port`: an OPA server run by the operator, expected to serve the bundle;
  one that does not answer at startup is logged as a warning (calls fail closed until it
  answers).

In every case the expected identity comes from the verified bundle directory, so a server
serving anything else answers `POLICY_STALE`. With a verification key configured the bundle's
signature is checked first (`policy/signing.py`): the embedded engine loads only the signed
bytes, and a spawned OPA is given the key so it verifies the tarball it serves as well.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.policy.bundle import BUNDLE_FILE, DEFAULT_BUNDLE_DIR, verify_bundle
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import BundleIdentity, PolicyEngine
from engram_memory.policy.signing import VerificationKey, verify_signed_bundle

log = logging.getLogger("engram_memory.policy")

EMBEDDED = "embedded"
OPA_SPAWN = "opa-spawn"


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


def _checked_identity(directory: Path, key: VerificationKey | None) -> BundleIdentity:
    """The lock-verified identity, and with `key` the signature-verified one (an OPA server
    never runs `policy.wasm`, so a bundle signed by `opa sign` is accepted here).

    Raises:
        BundleSignatureInvalid, BundleError: see `verify_signed_bundle` / `verify_bundle`.
    """
    if key is None:
        return verify_bundle(directory)
    return verify_signed_bundle(directory, key, bind_wasm=False)


def _log_signature_check(key: VerificationKey | None, identity: BundleIdentity) -> None:
    if key is None:
        log.info("policy bundle signatures are not checked (no bundle verification key)")
    else:
        log.info(
            "policy bundle signature verified: key id %s (%s), revision %s",
            key.key_id,
            key.fingerprint,
            identity.revision,
        )


@contextlib.contextmanager
def open_policy_engine(
    policy: str = EMBEDDED,
    bundle_dir: Path | str | None = None,
    *,
    opa_bin: Path | str | None = None,
    timeout_seconds: float = 2.0,
    verification_key: VerificationKey | None = None,
) -> Iterator[tuple[PolicyEngine, BundleIdentity]]:
    """Open the engine `policy` names and the bundle identity decisions must carry; close
    (and stop a spawned OPA) on exit. With `verification_key`, only a bundle signed with it
    is loaded or trusted.

    Raises:
        BundleSignatureInvalid: a key is configured and the bundle is unsigned, signed with
            another key or key id, or altered after signing.
        BundleError: the bundle does not match its lock.
        OpaBinaryNotFound, OpaServerStartError: `opa-spawn` cannot start OPA.
        ConfigurationError: `policy` is none of the forms above.
    """
    directory = Path(bundle_dir) if bundle_dir is not None else DEFAULT_BUNDLE_DIR
    engine: PolicyEngine
    if policy == EMBEDDED:
        embedded = EmbeddedWasmEngine(directory, verification_key=verification_key)
        _log_signature_check(verification_key, embedded.identity)
        try:
            yield embedded, embedded.identity
        finally:
            embedded.close()
        return
    # The OPA REST client (and aiohttp beneath it) only when an OPA server is configured: the
    # embedded engine, the default, starts without loading either.
    from engram_memory.policy.opa_server import OpaServerEngine, start_opa_server

    identity = _checked_identity(directory, verification_key)
    _log_signature_check(verification_key, identity)
    if policy == OPA_SPAWN:
        opa_key = None
        if verification_key is not None:
            opa_key = (verification_key.path, verification_key.key_id)
        with start_opa_server(directory / BUNDLE_FILE, opa_bin, verification_key=opa_key) as url:
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
        try:
            yield engine, identity
        finally:
            engine.close()
        return
    raise ConfigurationError(f"policy engine must be {EMBEDDED}, {OPA_SPAWN} or an OPA URL")
