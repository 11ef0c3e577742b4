"""Choosing the engine from configuration (`ENGRAM_POLICY`).

- `embedded`: the bundle's `policy.wasm` in-process (default; no OPA binary needed);
- `opa-spawn`: a private `opa run --server` on 127.0.0.1 serving the bundle, stopped with us;
- `http(s)://host:port`: an OPA server run by the operator, expected to serve the bundle;
  one that does not answer at startup is logged as a warning (calls fail closed until it
  answers).

In every case the expected identity comes from the verified bundle directory, so a server
serving anything else answers `POLICY_STALE`.
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
) -> Iterator[tuple[PolicyEngine, BundleIdentity]]:
    """Open the engine `policy` names and the bundle identity decisions must carry; close
    (and stop a spawned OPA) on exit.

    Raises:
        BundleError: the bundle does not match its lock.
        OpaBinaryNotFound, OpaServerStartError: `opa-spawn` cannot start OPA.
        ConfigurationError: `policy` is none of the forms above.
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
        try:
            yield engine, identity
        finally:
            engine.close()
        return
    raise ConfigurationError(f"policy engine must be {EMBEDDED}, {OPA_SPAWN} or an OPA URL")
