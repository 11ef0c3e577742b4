"""An OPA server must prove it runs the bundle its revision names (issue 23, finding 6).

Against a real `opa run --server`: a bundle whose `data.json` was edited behind an unchanged
`.manifest` revision reports the shipped revision, yet every decision is `POLICY_STALE`,
because what OPA serves (its modules' raw source, its data) is read back and differs from the
shipped bundle. The honest server passes and its receipts name the shipped digest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import PolicyStale
from engram_memory.policy.bundle import BUNDLE_FILE, DEFAULT_BUNDLE_DIR, read_tarball, write_tarball
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.engine import BundleIdentity
from engram_memory.policy.opa_server import OpaServerEngine, start_opa_server
from engram_memory.policy.revision_trust import PinnedRevision
from engram_memory.policy.served_content import (
    ServedContentTrust,
    expected_served_digest,
    served_digest,
)
from tests.policy.conftest import fixed_clock, subject

pytestmark = pytest.mark.opa


def edited_behind_its_label(target: Path) -> Path:
    """The shipped bundle with acme's memory switched off in `data.json`, `.manifest` (and
    so the revision OPA reports) unchanged."""
    files = read_tarball(DEFAULT_BUNDLE_DIR / BUNDLE_FILE)
    data = json.loads(files["data.json"])
    data["engram"]["config"]["tenants"]["acme"]["memory_enabled"] = False
    files["data.json"] = json.dumps(data).encode()
    write_tarball(files, target)
    return target


def _trust(engine: OpaServerEngine, identity: BundleIdentity) -> ServedContentTrust:
    files = read_tarball(DEFAULT_BUNDLE_DIR / BUNDLE_FILE)
    expected = {identity.revision: expected_served_digest(files)}
    return ServedContentTrust(PinnedRevision(identity), engine, expected)


@pytest.fixture(scope="module")
def edited_url(opa_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tarball = edited_behind_its_label(tmp_path_factory.mktemp("edited") / BUNDLE_FILE)
    with start_opa_server(tarball, opa_bin) as url:
        yield url


def test_the_shipped_bundle_served_by_opa_has_the_digest_computed_from_its_files(
    opa_default_engine: OpaServerEngine,
) -> None:
    expected, keys = expected_served_digest(read_tarball(DEFAULT_BUNDLE_DIR / BUNDLE_FILE))
    assert keys == ("config",)
    assert served_digest(opa_default_engine, keys) == expected


def test_an_honest_server_decides_and_receipts_name_the_shipped_digest(
    opa_default_engine: OpaServerEngine, default_identity: BundleIdentity
) -> None:
    decider = PolicyDecider(
        opa_default_engine, _trust(opa_default_engine, default_identity), fixed_clock
    )
    receipt = decider.authz(subject(), "engram_memory_get").decision.receipt
    assert receipt.bundle_digest == default_identity.digest


def test_data_edited_behind_an_unchanged_revision_makes_every_decision_stale(
    edited_url: str, default_identity: BundleIdentity
) -> None:
    engine = OpaServerEngine(edited_url)
    try:
        answer = engine.evaluate("engram/discovery/decision", subject().as_input())
        assert answer.revision == default_identity.revision  # the label says nothing
        decider = PolicyDecider(engine, _trust(engine, default_identity), fixed_clock)
        decisions = [
            lambda: decider.discovery(subject(), True),
            lambda: decider.authz(subject(), "engram_memory_get"),
            lambda: decider.confirmation(subject(), "engram_memory_forget"),
            lambda: decider.retention(subject(), 1_000, "make-ineligible", None),
        ]
        for decide in decisions:
            with pytest.raises(PolicyStale) as caught:
                decide()
            assert caught.value.code is ErrorCode.POLICY_STALE
    finally:
        engine.close()


class _Served:
    """What an OPA node serves, as `served_digest` reads it: modules by id, and data."""

    def __init__(self, modules: dict[str, str], data: dict[str, object]) -> None:
        self.modules, self.data = modules, data

    def served_modules(self) -> dict[str, str]:
        return dict(self.modules)

    def served_data(self, path: str) -> object:
        return self.data.get(path.removeprefix("engram/"))


def _bundle_as_served() -> tuple[_Served, str, tuple[str, ...]]:
    files = read_tarball(DEFAULT_BUNDLE_DIR / BUNDLE_FILE)
    expected, keys = expected_served_digest(files)
    modules = {
        f"/bundles/engram/{path}": body.decode("utf-8")
        for path, body in files.items()
        if path.endswith(".rego")
    }
    data = json.loads(files["data.json"])["engram"]
    return _Served(modules, data), expected, keys


def test_a_module_outside_the_bundle_root_beside_it_changes_nothing() -> None:
    served, expected, keys = _bundle_as_served()
    served.modules["/etc/opa/mask.rego"] = "package system.log\n\nmask contains x if { x := 1 }\n"
    assert served_digest(served, keys) == expected


def test_a_module_under_the_bundle_root_loaded_from_elsewhere_is_a_difference() -> None:
    served, expected, keys = _bundle_as_served()
    served.modules["/tmp/extra.rego"] = "package engram.admission\n\nextra := true\n"
    assert served_digest(served, keys) != expected
