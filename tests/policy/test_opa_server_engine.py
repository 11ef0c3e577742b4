"""The production engine against a real `opa run --server` on 127.0.0.1."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    ConfigurationError,
    OpaServerStartError,
    PolicyStale,
    PolicyUnavailable,
)
from engram_memory.policy.authoring.build import collect_sources
from engram_memory.policy.bundle import MANIFEST_FILE, identity_for, manifest_bytes, write_tarball
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.engine import BundleIdentity
from engram_memory.policy.opa_server import OpaServerEngine, start_opa_server
from tests.policy.conftest import POLICIES_DIR, REGO_DIR, fixed_clock, subject

pytestmark = pytest.mark.opa


def test_the_server_reports_the_shipped_revision_in_its_provenance(
    opa_default_engine: OpaServerEngine, default_identity: BundleIdentity
) -> None:
    answer = opa_default_engine.evaluate("engram/discovery/decision", subject().as_input())
    assert answer.revision == default_identity.revision
    assert opa_default_engine.engine_version.startswith("opa/")


def test_the_server_decides_every_domain(
    opa_default_engine: OpaServerEngine, default_identity: BundleIdentity
) -> None:
    decider = PolicyDecider(opa_default_engine, default_identity, fixed_clock)
    assert "engram_memory_forget" in decider.discovery(subject(), True).visible_tools
    assert decider.authz(subject(), "engram_memory_forget").allow
    assert decider.confirmation(subject(), "engram_memory_forget").required
    assert decider.retention(subject(), 1_000, "make-ineligible", None).allow
    assert not decider.reconciliation(subject(), ["family:hr"]).allow
    receipt = decider.authz(subject(), "engram_memory_get").decision.receipt
    assert receipt.engine_id == "opa-server"
    assert receipt.bundle_digest == default_identity.digest


def test_an_undefined_path_is_policy_unavailable(opa_default_engine: OpaServerEngine) -> None:
    with pytest.raises(PolicyUnavailable):
        opa_default_engine.evaluate("engram/nothing/here", {})


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_server_is_policy_unavailable(default_identity: BundleIdentity) -> None:
    engine = OpaServerEngine(f"http://127.0.0.1:{_unused_port()}", timeout_seconds=0.5)
    decider = PolicyDecider(engine, default_identity, fixed_clock)
    with pytest.raises(PolicyUnavailable) as caught:
        decider.authz(subject(), "engram_memory_get")
    assert caught.value.code is ErrorCode.POLICY_UNAVAILABLE
    engine.close()


def test_a_server_that_never_answers_times_out_as_policy_unavailable() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepts the connection in the backlog, never answers
        port = listener.getsockname()[1]
        engine = OpaServerEngine(f"http://127.0.0.1:{port}", timeout_seconds=0.2)
        with pytest.raises(PolicyUnavailable):
            engine.evaluate("engram/authz/decision", {})
        engine.close()


@pytest.fixture(scope="module")
def other_revision_url(opa_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same sources under another label: a different revision."""
    files = collect_sources(REGO_DIR, POLICIES_DIR)
    identity = identity_for(files, "someone-else")
    tarball = tmp_path_factory.mktemp("other") / "bundle.tar.gz"
    write_tarball({**files, MANIFEST_FILE: manifest_bytes(identity)}, tarball)
    with start_opa_server(tarball, opa_bin) as url:
        yield url


def test_a_server_serving_another_revision_is_policy_stale(
    other_revision_url: str, default_identity: BundleIdentity
) -> None:
    engine = OpaServerEngine(other_revision_url)
    decider = PolicyDecider(engine, default_identity, fixed_clock)
    with pytest.raises(PolicyStale) as caught:
        decider.authz(subject(), "engram_memory_get")
    assert caught.value.code is ErrorCode.POLICY_STALE
    engine.close()


def test_a_bundle_name_that_is_not_served_is_policy_unavailable(default_opa_url: str) -> None:
    engine = OpaServerEngine(default_opa_url, bundle_name="not-this-one")
    with pytest.raises(PolicyUnavailable):
        engine.evaluate("engram/authz/decision", {})
    engine.close()


def test_an_evaluation_error_on_the_server_is_policy_unavailable(hostile_bundle: Path) -> None:
    with start_opa_server(hostile_bundle / "bundle.tar.gz") as url:
        engine = OpaServerEngine(url)
        assert engine.evaluate("engram/authz/decision", {"ok": True}).result == {"reasons": ["ok"]}
        with pytest.raises(PolicyUnavailable):
            engine.evaluate("engram/authz/decision", {"conflict": True})
        engine.close()


def test_a_bundle_opa_cannot_load_fails_to_start(tmp_path: Path, opa_bin: Path) -> None:
    broken = tmp_path / "bundle.tar.gz"
    write_tarball({"engram/x.rego": b"package engram.x\n\nthis is not rego\n"}, broken)
    with pytest.raises(OpaServerStartError), start_opa_server(broken, opa_bin):
        pass


def test_a_malformed_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        OpaServerEngine("ftp://example")
