"""The bundle shipped as package data (`policy/_bundle/`): where it is, whether it is current
with the checkout's `rego/` and `policies/`, and rebuilding it (`engram-memory policy build`
and `policy check` without arguments).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from engram_memory.contract.exceptions import BundleError
from engram_memory.policy.authoring.build import build_bundle, compute_identity
from engram_memory.policy.bundle import (
    BUNDLE_FILE,
    DEFAULT_BUNDLE_DIR,
    DEFAULT_LABEL,
    LOCK_FILE,
    WASM_FILE,
    Progress,
    load_bundle_identity,
    verify_bundle,
)
from engram_memory.policy.engine import BundleIdentity

_REPO_ROOT = Path(__file__).resolve().parents[4]


def default_bundle_dir() -> Path:
    """The bundle directory shipped inside the package (`policy/_bundle/`)."""
    return DEFAULT_BUNDLE_DIR


def default_sources() -> tuple[Path, Path]:
    """`rego/` and `policies/` of the source checkout this package runs from.

    Raises:
        BundleError: not running from a source checkout (e.g. a wheel install).
    """
    rego, policies = _REPO_ROOT / "rego", _REPO_ROOT / "policies"
    if not rego.is_dir() or not policies.is_dir():
        raise BundleError("rego/ and policies/ sources are not available (installed package?)")
    return rego, policies


def default_bundle_is_current(
    rego_dir: Path | str | None = None,
    policies_dir: Path | str | None = None,
    bundle_dir: Path | str = DEFAULT_BUNDLE_DIR,
) -> bool:
    """Whether the shipped bundle's lock matches a fresh digest of the sources (pure Python).

    Raises:
        BundleError: sources or lock unavailable.
        PolicyDataError: the policy data is invalid.
    """
    if rego_dir is None or policies_dir is None:
        rego_dir, policies_dir = default_sources()
    shipped = load_bundle_identity(bundle_dir)
    fresh = compute_identity(rego_dir, policies_dir, label=shipped.label)
    return fresh == shipped


def shipped_bundle_differs(
    *, opa_bin: Path | str | None = None, progress: Progress | None = None
) -> list[str]:
    """Rebuild from the checkout's sources with the pinned OPA and compare byte for byte.

    Returns the names of shipped files that differ (empty: the shipped bundle, its Wasm
    included, is exactly what the sources produce).

    Raises:
        BundleError, PolicyDataError, OpaBinaryNotFound: as `build_bundle`.
    """
    rego, policies = default_sources()
    with tempfile.TemporaryDirectory(prefix="engram-bundle-check-") as tmp:
        build_bundle(rego, policies, tmp, label=DEFAULT_LABEL, opa_bin=opa_bin, progress=progress)
        return [
            name
            for name in (BUNDLE_FILE, WASM_FILE, LOCK_FILE)
            if (Path(tmp) / name).read_bytes() != (DEFAULT_BUNDLE_DIR / name).read_bytes()
        ]


def build_default_bundle(
    *,
    opa_bin: Path | str | None = None,
    progress: Progress | None = None,
    run_tests: bool = True,
) -> BundleIdentity:
    """Rebuild the bundle shipped as package data from the checkout's `rego/` + `policies/`
    (what `engram-memory policy build` does without arguments).

    Raises:
        BundleError, PolicyDataError, OpaBinaryNotFound: as `build_bundle`.
    """
    rego, policies = default_sources()
    with tempfile.TemporaryDirectory(prefix="engram-default-bundle-") as tmp:
        identity = build_bundle(
            rego,
            policies,
            tmp,
            label=DEFAULT_LABEL,
            opa_bin=opa_bin,
            run_tests=run_tests,
            progress=progress,
        )
        verify_bundle(tmp)
        DEFAULT_BUNDLE_DIR.mkdir(parents=True, exist_ok=True)
        for name in (BUNDLE_FILE, WASM_FILE, LOCK_FILE):
            shutil.copyfile(Path(tmp) / name, DEFAULT_BUNDLE_DIR / name)
    return identity
