"""Shared fixtures: the pinned OPA binary, bundles built from the sources, both engines."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_memory.policy.authoring.build import build_bundle
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR, DOMAINS, load_bundle_identity
from engram_memory.policy.decider import AdmissionCandidate, PolicyDecider, Subject
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import BundleIdentity
from engram_memory.policy.opa_binary import find_opa_binary
from engram_memory.policy.opa_server import OpaServerEngine, start_opa_server

REPO = Path(__file__).resolve().parents[2]
REGO_DIR = REPO / "rego"
POLICIES_DIR = REPO / "policies"
TEST_POLICIES_DIR = Path(__file__).parent / "assets" / "policies"
NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00.000Z


def fixed_clock() -> int:
    return NOW_MS


def opa_binary_or_skip() -> Path:
    """The OPA binary; skipped locally when absent, a failure in CI (CI=true)."""
    found = find_opa_binary()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("OPA binary not found in CI (set ENGRAM_OPA_BIN or run scripts/test)")
        pytest.skip("OPA binary not found (set ENGRAM_OPA_BIN)")
    return found


@pytest.fixture(scope="session")
def opa_bin() -> Path:
    """The OPA binary (see `opa_binary_or_skip`)."""
    return opa_binary_or_skip()


@pytest.fixture(scope="session")
def default_identity() -> BundleIdentity:
    return load_bundle_identity(DEFAULT_BUNDLE_DIR)


@pytest.fixture(scope="session")
def embedded_default() -> Iterator[EmbeddedWasmEngine]:
    engine = EmbeddedWasmEngine(DEFAULT_BUNDLE_DIR)
    yield engine
    engine.close()


@pytest.fixture
def default_decider(
    embedded_default: EmbeddedWasmEngine, default_identity: BundleIdentity
) -> PolicyDecider:
    return PolicyDecider(embedded_default, default_identity, fixed_clock)


@pytest.fixture(scope="session")
def test_bundle_dir(opa_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rego/ + the rule-covering test policies, built by the pinned OPA."""
    out = tmp_path_factory.mktemp("test-bundle")
    build_bundle(REGO_DIR, TEST_POLICIES_DIR, out, label="test", opa_bin=opa_bin, run_tests=False)
    return out


HOSTILE_AUTHZ = """package engram.authz

decision := {"reasons": ["one"]} if input.conflict

decision := {"reasons": ["two"]} if input.conflict

decision := {"size": count(numbers.range(1, input.size))} if input.size

decision := {"slow": count(hits)} if input.slow

hits contains i if {
	some i in numbers.range(1, input.slow)
	some j in numbers.range(1, input.slow)
	i * j == -1
}

decision := {"reasons": ["ok"]} if input.ok
"""


@pytest.fixture(scope="session")
def hostile_bundle(opa_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle whose authz entrypoint conflicts, exhausts memory or loops on demand."""
    root = tmp_path_factory.mktemp("hostile")
    for domain in DOMAINS:
        module = root / "rego" / "engram" / domain / f"{domain}.rego"
        module.parent.mkdir(parents=True)
        text = f'package engram.{domain}\n\ndecision := {{"reasons": ["x"]}}\n'
        module.write_text(HOSTILE_AUTHZ if domain == "authz" else text, "utf-8")
    (root / "policies").mkdir()
    build_bundle(
        root / "rego",
        root / "policies",
        root / "out",
        label="hostile",
        opa_bin=opa_bin,
        run_tests=False,
    )
    return root / "out"


@pytest.fixture(scope="session")
def default_opa_url(opa_bin: Path) -> Iterator[str]:
    with start_opa_server(DEFAULT_BUNDLE_DIR / "bundle.tar.gz", opa_bin) as url:
        yield url


@pytest.fixture
def opa_default_engine(default_opa_url: str) -> Iterator[OpaServerEngine]:
    engine = OpaServerEngine(default_opa_url)
    yield engine
    engine.close()


def subject(
    tenant: str = "acme",
    workspace: str = "support",
    principal: str = "user:alice",
    purpose_ref: str = "purpose:support-case",
) -> Subject:
    return Subject(
        tenant=tenant,
        workspace=workspace,
        principal=principal,
        agent_id="agent:test",
        purpose_ref=purpose_ref,
        host_id="host:test",
    )


# One candidate every admission test asks about (its record digest is RECORD).
RECORD = "sha256:" + "b" * 64
CANDIDATE = AdmissionCandidate(
    candidate_id="candidate_" + "0" * 64,
    payload_digest="sha256:" + "a" * 64,
    record_digest=RECORD,
    evidence_ref="evidence:ticket/1",
    evidence_digest="sha256:" + "c" * 64,
    component_kinds=("decision",),
    citation_count=1,
    source_refs=("source:case",),
    has_attestation=False,
)
