"""Fleet mode as configuration: a bundle service needs an OPA URL and the verification key;
its URL must be http(s); the fetch refuses what the bundle service does not serve."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engram_memory.contract.exceptions import BundleFetchFailed, ConfigurationError
from engram_memory.core.service_config import load_config
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR
from engram_memory.policy.fleet import open_policy
from engram_memory.policy.revision_trust import MAX_BUNDLE_BYTES, fetch_bundle
from engram_memory.policy.signing import load_verification_key
from tests.policy.signed_bundles import KEY_ID, KeyPair, make_key_pair, signed_copy


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key_pair(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def env(tmp_path: Path, keys: KeyPair) -> dict[str, str]:
    for name in ("root.key", "host-keys.pem"):
        (tmp_path / name).write_text("placeholder: only existence is checked here\n")
    return {
        "ENGRAM_ROOT_KEY": str(tmp_path / "root.key"),
        "ENGRAM_HOST_KEYS": str(tmp_path / "host-keys.pem"),
        "ENGRAM_POLICY": "http://127.0.0.1:8181",
        "ENGRAM_BUNDLE_SERVICE": "http://127.0.0.1:8000/engram/bundle.tar.gz",
        "ENGRAM_BUNDLE_VERIFICATION_KEY": str(keys.public),
        "ENGRAM_BUNDLE_KEY_ID": KEY_ID,
    }


def test_a_bundle_service_url_is_kept(env: dict[str, str]) -> None:
    assert load_config(env=env).bundle_service == env["ENGRAM_BUNDLE_SERVICE"]


@pytest.mark.parametrize("url", ["ftp://bundles/engram.tar.gz", "bundles/engram.tar.gz", "http://"])
def test_a_bundle_service_that_is_not_an_http_url_is_refused(env: dict[str, str], url: str) -> None:
    env["ENGRAM_BUNDLE_SERVICE"] = url
    with pytest.raises(ConfigurationError):
        load_config(env=env)


@pytest.mark.parametrize("policy", ["embedded", "opa-spawn"])
def test_a_bundle_service_needs_an_opa_url(policy: str, keys: KeyPair, tmp_path: Path) -> None:
    key = load_verification_key(keys.public, KEY_ID)
    bundle = signed_copy(tmp_path / "bundle", keys)
    with (
        pytest.raises(ConfigurationError),
        open_policy(
            policy, bundle, verification_key=key, bundle_service="http://127.0.0.1:1/b.tar.gz"
        ),
    ):
        pass


def test_a_bundle_service_needs_the_verification_key() -> None:
    with (
        pytest.raises(ConfigurationError),
        open_policy(
            "http://127.0.0.1:1", DEFAULT_BUNDLE_DIR, bundle_service="http://127.0.0.1:1/b.tar.gz"
        ),
    ):
        pass


class _Server:
    def __init__(self, status: int, body: bytes) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/engram/bundle.tar.gz"
        threading.Thread(target=outer.server.serve_forever, daemon=True).start()


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[str]:
    status, body = request.param
    server = _Server(status, body)
    try:
        yield server.url
    finally:
        server.server.shutdown()
        server.server.server_close()


@pytest.mark.parametrize("served", [(200, b"tarball")], indirect=True)
def test_the_published_bundle_is_fetched(served: str) -> None:
    assert fetch_bundle(served) == b"tarball"


@pytest.mark.parametrize(
    "served",
    [(404, b"missing"), (500, b"broken"), (200, b"x" * (MAX_BUNDLE_BYTES + 1))],
    indirect=True,
    ids=["not_published", "server_error", "too_large"],
)
def test_what_the_bundle_service_does_not_serve_properly_is_a_failed_fetch(served: str) -> None:
    with pytest.raises(BundleFetchFailed):
        fetch_bundle(served)


def test_an_unreachable_bundle_service_is_a_failed_fetch() -> None:
    with pytest.raises(BundleFetchFailed):
        fetch_bundle("http://127.0.0.1:1/engram/bundle.tar.gz", timeout_seconds=1.0)
