"""An OPA fleet rollout end to end: a bundle service started here, a REAL OPA configured by
the kit in examples/opa (signed bundles, polling, masked decision logs, status), and the
REAL `serve` process pointed at both. A signed revision 2 is published and decides calls
without restarting the service, the audit trail records the change, and an unsigned
revision 3 is refused by OPA while the service keeps deciding with revision 2.
(tests/staleness/test_fleet_revisions.py covers what the service does with a revision it
cannot verify, and a call straddling a rollout.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.admin.verification import verify_data_dir
from engram_memory.client.reference_host import Binding, CallOutcome, connect
from engram_memory.host.keys import HostSigningKey
from engram_memory.policy.authoring.build import build_bundle
from engram_memory.policy.authoring.sign import sign_bundle
from engram_memory.policy.bundle import BUNDLE_FILE
from engram_memory.policy.engine import BundleIdentity
from engram_memory.policy.opa_binary import require_opa_binary
from engram_memory.store.database import Database
from tests.policy.signed_bundles import make_key_pair
from tests.servers import free_port, http_server, server_env

pytestmark = [pytest.mark.e2e, pytest.mark.opa]

REPO = Path(__file__).resolve().parents[2]
KIT = REPO / "examples" / "opa"
KEY_ID = "engram-policy"
RESOURCE = "/engram/bundle.tar.gz"
ROLLOUT_TIMEOUT_SECONDS = 30.0
ALICE = Binding("acme", "support", "user:alice", "purpose:support-case")
# Not granted in the shipped policies; revision 2 grants her `reader`.
ERIN = Binding("acme", "support", "user:erin", "purpose:support-case")
ERIN_GRANT = """
      - principal: "user:erin"           # added by the rollout under test
        roles: [reader]
        purposes: ["purpose:support-case"]
"""


@dataclass(frozen=True)
class Revision:
    directory: Path
    identity: BundleIdentity

    @property
    def tarball(self) -> bytes:
        return (self.directory / BUNDLE_FILE).read_bytes()


def _policies_with_erin(target: Path) -> Path:
    shutil.copytree(REPO / "policies", target)
    acme = target / "acme.yaml"
    text = acme.read_text("utf-8")
    anchor = "    grants:\n"
    assert anchor in text
    acme.write_text(text.replace(anchor, anchor + ERIN_GRANT.lstrip("\n"), 1), "utf-8")
    return target


def _build(root: Path, label: str, policies: Path, signing_key: Path | None) -> Revision:
    out = root / label
    identity = build_bundle(REPO / "rego", policies, out, label=label, run_tests=False)
    if signing_key is not None:
        sign_bundle(out, signing_key, KEY_ID)
    return Revision(out, identity)


@dataclass(frozen=True)
class Fleet:
    one: Revision
    two: Revision
    three_unsigned: Revision
    public_key: Path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    """Revision 1 (shipped policies), 2 (Erin granted), both signed; 3 unsigned."""
    root = tmp_path_factory.mktemp("fleet")
    keys = make_key_pair(root)
    signing_key, public_key = keys.private, keys.public
    with_erin = _policies_with_erin(root / "policies-2")
    return Fleet(
        one=_build(root, "fleet-one", REPO / "policies", signing_key),
        two=_build(root, "fleet-two", with_erin, signing_key),
        three_unsigned=_build(root, "fleet-three", REPO / "policies", None),
        public_key=public_key,
    )


class BundleService:
    """A static bundle service on 127.0.0.1: serves the published tarball with an ETag
    (304 on If-None-Match), as the kit's OPA nodes expect."""

    def __init__(self) -> None:
        self._published = b""
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body, etag = service.current()
                if self.path != RESOURCE or not body:
                    self.send_error(404)
                    return
                if self.headers.get("If-None-Match") == etag:
                    self.send_response(304)
                    self.send_header("ETag", etag)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/gzip")
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def current(self) -> tuple[bytes, str]:
        with self._lock:
            body = self._published
        return body, '"' + hashlib.sha256(body).hexdigest() + '"'

    def publish(self, tarball: bytes) -> None:
        with self._lock:
            self._published = tarball

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class OpaNode:
    process: subprocess.Popen[bytes]
    url: str
    log: IO[bytes]

    def status(self) -> dict[str, Any]:
        """The engram bundle's entry of OPA's status API (GET /v1/status)."""
        try:
            body = httpx.get(f"{self.url}/v1/status", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return {}
        entry: dict[str, Any] = body.get("result", {}).get("bundles", {}).get("engram", {})
        return entry

    def wait_until(self, condition: str, holds: Any) -> dict[str, Any]:
        """Poll the status API until `holds(status)`; waiting on the process, not sleeping,
        so a dead OPA fails at once."""
        deadline = time.monotonic() + ROLLOUT_TIMEOUT_SECONDS
        delay = 0.01
        while not holds(status := self.status()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=delay)
            if self.process.poll() is not None:
                raise RuntimeError(f"opa exited while waiting until {condition}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"OPA status never showed {condition}: {status}")
            delay = min(delay * 2, 0.2)
        return status

    def decision_logs(self) -> list[dict[str, Any]]:
        self.log.flush()
        self.log.seek(0)
        lines = self.log.read().decode("utf-8", "replace").splitlines()
        entries = [json.loads(line) for line in lines if line.startswith("{")]
        return [e for e in entries if e.get("msg") == "Decision Log"]


@contextlib.contextmanager
def opa_node(bundles: BundleService, public_key: Path, tmp_path: Path) -> Iterator[OpaNode]:
    """`opa run --server -c examples/opa/config.yaml mask.rego`, pointed at `bundles`."""
    port = free_port()
    argv = [
        str(require_opa_binary(None)),
        "run",
        "--server",
        "--addr",
        f"127.0.0.1:{port}",
        "--config-file",
        str(KIT / "config.yaml"),
        "--set",
        f"services.bundle-service.url={bundles.url}",
        "--set-file",
        f"keys.{KEY_ID}.key={public_key}",
        # Fast polling for the test; the kit's defaults are 10 to 30 s.
        "--set",
        "bundles.engram.polling.min_delay_seconds=1",
        "--set",
        "bundles.engram.polling.max_delay_seconds=1",
        "--skip-version-check",
        str(KIT / "mask.rego"),
    ]
    with (tmp_path / "opa.log").open("w+b") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            yield OpaNode(process, f"http://127.0.0.1:{port}", log)
        finally:
            process.terminate()
            process.wait(timeout=10)


@pytest.fixture
def bundles() -> Iterator[BundleService]:
    service = BundleService()
    try:
        yield service
    finally:
        service.close()


def _outcome(result: CallOutcome) -> str:
    """`ok`, or the error code of a refused call."""
    if result.envelope.get("ok") is True:
        return "ok"
    return str(result.envelope.get("error", {}).get("code", "refused"))


async def _search(url: str, signer: HostSigningKey, binding: Binding) -> str:
    from mcp import MCPError

    async with connect(url, signer, binding) as host:
        args = {"query": "anything", "purpose_ref": binding.purpose_ref}
        try:
            return _outcome(await host.call("engram_memory_search", args))
        except MCPError as exc:  # a tool the policy hides is refused at protocol level
            return f"protocol:{exc.error.code}"


def _policy_stream(data_dir: Path) -> list[tuple[str, str, list[str]]]:
    database = Database.open(data_dir)
    try:
        with database.reading() as tx:
            rows = tx.fetchall(
                "SELECT bundle_revision, bundle_digest, target_ids_json FROM audit_entries"
                " WHERE scope_ref = 'policy' ORDER BY sequence"
            )
    finally:
        database.close()
    return [(str(r[0]), str(r[1]), json.loads(str(r[2]))) for r in rows]


def _call_revisions(data_dir: Path) -> list[str]:
    database = Database.open(data_dir)
    try:
        with database.reading() as tx:
            rows = tx.fetchall(
                "SELECT bundle_revision FROM audit_entries"
                " WHERE scope_ref LIKE 'tenant:%' ORDER BY sequence"
            )
    finally:
        database.close()
    return [str(r[0]) for r in rows]


def _serve_env(
    tmp_path: Path, fleet: Fleet, opa_url: str, bundle_url: str
) -> tuple[dict[str, str], HostSigningKey]:
    """The service's environment (fleet mode) and the host key that mints its calls."""
    root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
    env = server_env(
        tmp_path / "data",
        root_key,
        public_keys,
        ENGRAM_POLICY=opa_url,
        ENGRAM_BUNDLE=str(fleet.one.directory),
        ENGRAM_BUNDLE_SERVICE=bundle_url + RESOURCE,
        ENGRAM_BUNDLE_VERIFICATION_KEY=str(fleet.public_key),
        ENGRAM_BUNDLE_KEY_ID=KEY_ID,
    )
    return env, HostSigningKey.from_pem_file(signing_key)


async def test_a_signed_revision_rolls_out_without_restart_and_an_unsigned_one_is_refused(
    fleet: Fleet, bundles: BundleService, tmp_path: Path
) -> None:
    bundles.publish(fleet.one.tarball)
    with opa_node(bundles, fleet.public_key, tmp_path) as opa:
        opa.wait_until(
            "revision 1 active", lambda s: s.get("active_revision") == fleet.one.identity.revision
        )
        env, signer = _serve_env(tmp_path, fleet, opa.url, bundles.url)
        with http_server(env) as (process, url):
            assert await _search(url, signer, ALICE) == "ok"
            assert await _search(url, signer, ERIN) != "ok"

            bundles.publish(fleet.two.tarball)
            opa.wait_until(
                "revision 2 active",
                lambda s: s.get("active_revision") == fleet.two.identity.revision,
            )
            assert await _search(url, signer, ERIN) == "ok"
            assert await _search(url, signer, ALICE) == "ok"

            bundles.publish(fleet.three_unsigned.tarball)
            status = opa.wait_until(
                "the unsigned bundle refused", lambda s: s.get("code") == "bundle_error"
            )
            assert status["active_revision"] == fleet.two.identity.revision
            assert await _search(url, signer, ERIN) == "ok"  # revision 3 would refuse her
            process.terminate()
            process.wait(timeout=20)
        logs = opa.decision_logs()
    data_dir = tmp_path / "data"
    one, two = fleet.one.identity, fleet.two.identity
    assert _policy_stream(data_dir) == [(two.revision, two.digest, [one.revision])]
    revisions = _call_revisions(data_dir)
    assert revisions[:2] == [one.revision, one.revision]
    assert set(revisions[2:]) == {two.revision}
    assert verify_data_dir(data_dir) is not None
    # The decision logs carry no principal, agent or purpose: masked by the kit's policy.
    assert logs
    for entry in logs:
        assert {"principal", "agent_id", "purpose_ref"}.isdisjoint(entry.get("input", {}))
    assert any("/input/principal" in entry.get("erased", []) for entry in logs)
