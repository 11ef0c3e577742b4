"""An OPA fleet's revisions, as the service sees them: a REAL OPA whose bundle is switched
while it runs, a bundle service on 127.0.0.1, the trust `policy.fleet.open_policy` builds for an
OPA URL with a bundle service and a verification key (real fetch, real signature check),
and the service over a real DuckDB store.

- a call whose decisions straddle a rollout is POLICY_STALE and writes nothing; the next
  call decides with the new revision, whose change the audit trail records first;
- a revision OPA serves that the service cannot verify (unsigned) is POLICY_STALE, and the
  bundle service is not asked again on every call.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.crypto.keys import RootKey
from engram_memory.policy.authoring.default_bundle import default_bundle_dir
from engram_memory.policy.authoring.sign import sign_bundle
from engram_memory.policy.bundle import BUNDLE_FILE, verify_bundle
from engram_memory.policy.decider import ADMISSION_PATH
from engram_memory.policy.fleet import open_policy
from engram_memory.policy.opa_server import OpaServerEngine
from engram_memory.policy.signing import load_verification_key
from engram_memory.store.database import Database
from tests.harness import Caller
from tests.harness import error_of as _error
from tests.harness import fresh_key as _key
from tests.harness import ok_value as _value
from tests.policy.signed_bundles import make_key_pair
from tests.staleness.conftest import Bundle, WatchedOpa, memory_service
from tests.staleness.test_bundle_switch import (
    ADMIT,
    CAPTURE,
    SwitchBeforePath,
    _candidate_state,
    _journal_length,
)

pytestmark = pytest.mark.opa

KEY_ID = "engram-policy"
RESOURCE = "/engram/bundle.tar.gz"


@dataclass(frozen=True)
class Signed:
    a: Bundle
    b: Bundle
    public_key: Path


def _signed_copy(source_dir: Path, target: Path, signing_key: Path) -> Path:
    shutil.copytree(source_dir, target)
    sign_bundle(target, signing_key, KEY_ID)
    return target


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory, bundle_b: Bundle) -> Signed:
    """The shipped bundle (A) and another revision (B), both signed by one key."""
    root = tmp_path_factory.mktemp("signed")
    keys = make_key_pair(root)
    signing_key, public_key = keys.private, keys.public
    a_dir = _signed_copy(default_bundle_dir(), root / "a", signing_key)
    b_dir = _signed_copy(bundle_b.tarball.parent, root / "b", signing_key)
    return Signed(
        a=Bundle(a_dir / BUNDLE_FILE, verify_bundle(a_dir)),
        b=Bundle(b_dir / BUNDLE_FILE, bundle_b.identity),
        public_key=public_key,
    )


class BundleService:
    """Serves the published tarball at RESOURCE; counts the requests."""

    def __init__(self) -> None:
        self.published = b""
        self.requests = 0
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service.requests += 1
                if self.path != RESOURCE or not service.published:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(service.published)))
                self.end_headers()
                self.wfile.write(service.published)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{RESOURCE}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def bundles() -> Iterator[BundleService]:
    service = BundleService()
    try:
        yield service
    finally:
        service.close()


@pytest.fixture
def fleet_opa(tmp_path: Path, signed: Signed) -> Iterator[WatchedOpa]:
    """OPA checking bundle signatures itself, as the fleet kit configures it."""
    verification = ["--verification-key", str(signed.public_key), "--verification-key-id", KEY_ID]
    opa = WatchedOpa(tmp_path / "opa", signed.a, verification)
    try:
        yield opa
    finally:
        opa.stop()


def _policy_stream(data_dir: Path) -> list[tuple[str, str]]:
    database = Database.open(data_dir)
    try:
        with database.reading() as tx:
            rows = tx.fetchall(
                "SELECT bundle_revision, target_ids_json FROM audit_entries"
                " WHERE scope_ref = 'policy' ORDER BY sequence"
            )
    finally:
        database.close()
    return [(str(r[0]), str(r[1])) for r in rows]


def test_a_call_straddling_a_rollout_is_stale_and_the_next_decides_with_the_new_revision(
    tmp_path: Path, fleet_opa: WatchedOpa, signed: Signed, bundles: BundleService
) -> None:
    bundles.published = signed.b.tarball.read_bytes()
    root_key = RootKey(os.urandom(32))
    data_dir = tmp_path / "data"
    with open_policy(
        fleet_opa.url,
        signed.a.tarball.parent,
        bundle_service=bundles.url,
        verification_key=load_verification_key(signed.public_key, KEY_ID),
    ) as (inner, trust):
        assert isinstance(inner, OpaServerEngine)
        engine = SwitchBeforePath(inner, ADMISSION_PATH, lambda: fleet_opa.serve(signed.b))
        with memory_service(data_dir, root_key, engine, trust) as (svc, services):
            alice = Caller(svc)
            captured = _value(alice.call(CAPTURE, demo_capture_arguments("Ok.", _key("c"))))
            admit = {"candidate_id": captured["candidate_id"], "idempotency_key": _key("a")}
            written = _journal_length(services)

            assert _error(alice.call(ADMIT, admit)) == ("POLICY_STALE", True)
            assert _journal_length(services) == written
            assert _candidate_state(services, captured["candidate_id"]) == "pending"
            assert bundles.requests == 1  # B fetched and verified once

            # The same key and arguments: the straddling attempt bound nothing.
            assert _value(alice.call(ADMIT, admit))["outcome"]["status"] == "accepted"
            assert services.decider.expected == signed.b.identity
    assert _policy_stream(data_dir) == [
        (signed.b.identity.revision, f'["{signed.a.identity.revision}"]')
    ]


def test_a_revision_the_service_cannot_verify_is_stale_without_a_fetch_per_call(
    tmp_path: Path,
    watched_opa: WatchedOpa,
    signed: Signed,
    bundles: BundleService,
    bundle_b: Bundle,
) -> None:
    # An OPA node that does not check signatures serves an unsigned B, also published.
    bundles.published = bundle_b.tarball.read_bytes()
    watched_opa.serve(bundle_b)
    with open_policy(
        watched_opa.url,
        signed.a.tarball.parent,
        bundle_service=bundles.url,
        verification_key=load_verification_key(signed.public_key, KEY_ID),
    ) as (engine, trust):
        root_key = RootKey(os.urandom(32))
        with memory_service(tmp_path / "data", root_key, engine, trust) as (svc, _):
            alice = Caller(svc)
            for _ in range(5):
                capture = demo_capture_arguments("Not now.", _key("c"))
                assert _error(alice.call(CAPTURE, capture)) == ("POLICY_STALE", True)
            # Backing off (1 s, then 2 s): far fewer fetches than calls.
            assert 1 <= bundles.requests <= 2
    assert _policy_stream(tmp_path / "data") == []
