"""A real OPA server whose bundle can be switched while it runs, and the service over it.

OPA runs `opa run --server --watch` on 127.0.0.1 with a bundle tarball it watches; replacing
that file (atomically, by rename) makes OPA activate the new bundle without a restart, as an
operator's redeploy would. `WatchedOpa.serve` returns once OPA itself reports the new
revision in its decision provenance (bounded wait on that condition, never a sleep).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import PolicyUnavailable
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.authoring.build import build_bundle
from engram_memory.policy.authoring.default_bundle import (
    default_bundle_dir,
    default_sources,
)
from engram_memory.policy.bundle import BUNDLE_FILE, verify_bundle
from engram_memory.policy.decider import DISCOVERY_PATH, PolicyDecider
from engram_memory.policy.engine import BundleIdentity, PolicyEngine
from engram_memory.policy.opa_binary import require_opa_binary
from engram_memory.policy.opa_server import OpaServerEngine
from engram_memory.policy.revision_trust import RevisionTrust
from engram_memory.store.database import Database
from engram_memory.tools.dispatch import MemoryService
from tests.harness import SIGNER

SWITCH_TIMEOUT_SECONDS = 20.0


@dataclass(frozen=True)
class Bundle:
    tarball: Path
    identity: BundleIdentity


@pytest.fixture(scope="session")
def bundle_a() -> Bundle:
    """The shipped bundle (what the service expects by default)."""
    directory = default_bundle_dir()
    return Bundle(directory / BUNDLE_FILE, verify_bundle(directory))


@pytest.fixture(scope="session")
def bundle_b(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    """The same rego/ and policies/ built under another label: another revision."""
    rego, policies = default_sources()
    out = tmp_path_factory.mktemp("bundle-b")
    identity = build_bundle(rego, policies, out, label="other", run_tests=False)
    return Bundle(out / BUNDLE_FILE, identity)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class WatchedOpa:
    """`opa run --server --watch` on 127.0.0.1 serving whichever bundle `serve` installs."""

    def __init__(self, workdir: Path, initial: Bundle, extra_args: Sequence[str] = ()) -> None:
        self._watched = workdir / "watched"
        self._staging = workdir / "staging"
        self._watched.mkdir(parents=True)
        self._staging.mkdir(parents=True)
        self._served = self._watched / BUNDLE_FILE
        shutil.copyfile(initial.tarball, self._served)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        argv = [
            str(require_opa_binary()),
            "run",
            "--server",
            "--addr",
            f"127.0.0.1:{port}",
            "--bundle",
            str(self._served),
            "--watch",
            "--log-level",
            "error",
            "--skip-version-check",
            "--shutdown-grace-period",
            "1",
            *extra_args,
        ]
        self._process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        self._probe = OpaServerEngine(self.url, timeout_seconds=1.0)
        try:
            self._wait_for(initial.identity.revision)
        except BaseException:
            self.stop()
            raise

    def revision(self) -> str | None:
        """The revision OPA reports in its provenance, or None while it answers nothing."""
        try:
            return self._probe.evaluate(DISCOVERY_PATH, {}).revision
        except PolicyUnavailable:
            return None

    def _wait_for(self, revision: str) -> None:
        deadline = time.monotonic() + SWITCH_TIMEOUT_SECONDS
        delay = 0.005
        while self.revision() != revision:
            # Waiting on the process (not sleeping) fails fast if OPA died meanwhile.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=delay)
            if self._process.poll() is not None:
                self._log.seek(0)
                raise RuntimeError(f"opa exited: {self._log.read()[-2000:]!r}")
            if time.monotonic() >= deadline:
                raise RuntimeError(f"opa never reported revision {revision}")
            delay = min(delay * 2, 0.1)

    def serve(self, bundle: Bundle) -> None:
        """Replace the watched tarball atomically; return once OPA decides with it."""
        staged = self._staging / BUNDLE_FILE
        shutil.copyfile(bundle.tarball, staged)
        os.replace(staged, self._served)
        self._wait_for(bundle.identity.revision)

    def stop(self) -> None:
        self._probe.close()
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        self._log.close()


@pytest.fixture
def watched_opa(tmp_path: Path, bundle_a: Bundle) -> Iterator[WatchedOpa]:
    opa = WatchedOpa(tmp_path / "opa", bundle_a)
    try:
        yield opa
    finally:
        opa.stop()


def real_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@contextlib.contextmanager
def memory_service(
    data_dir: Path,
    root_key: RootKey,
    engine: PolicyEngine,
    expected: BundleIdentity | RevisionTrust,
    decider_clock: Callable[[], int] = real_clock_ms,
) -> Iterator[tuple[MemoryService, Services]]:
    """One service lifetime over `data_dir` (open the same directory again to "restart")."""
    database = Database.open(data_dir)
    services = Services(
        database=database,
        keys=KeyStore(data_dir / KEYS_DIRECTORY),
        decider=PolicyDecider(engine, expected, decider_clock),
        root_key=root_key,
        host_keys=HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()}),
        settings=ServiceSettings(host_memory_enabled=True),
        clock_ms=real_clock_ms,
    )
    try:
        yield MemoryService(services), services
    finally:
        database.close()
