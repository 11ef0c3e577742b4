"""Build a policy bundle: validate the data, check and test the Rego, compile to Wasm.

The layout and the content digest are `policy/bundle.py`'s (the runtime reads what this
writes); this module needs the OPA binary and runs the tenant tests first.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from engram_memory.contract.canonical import canonical_json
from engram_memory.contract.exceptions import BundleError
from engram_memory.policy.authoring.data_compiler import compile_policies
from engram_memory.policy.authoring.tenant_tests import describe_report, run_policy_tests
from engram_memory.policy.bundle import (
    BUNDLE_FILE,
    DATA_FILE,
    DEFAULT_LABEL,
    ENTRYPOINTS,
    LOCK_FILE,
    LOCK_FORMAT,
    MANIFEST_FILE,
    WASM_FILE,
    Progress,
    file_list,
    identity_for,
    manifest_bytes,
    read_tarball,
    sha256_hex,
    write_tarball,
)
from engram_memory.policy.engine import BundleIdentity
from engram_memory.policy.opa_binary import opa_version, require_opa_binary


def collect_sources(rego_dir: Path | str, policies_dir: Path | str) -> dict[str, bytes]:
    """Bundle path -> bytes for every file of the bundle except `.manifest`.

    Raises:
        PolicyDataError: the policy data is invalid.
        BundleError: `rego_dir` holds no modules.
    """
    rego_root = Path(rego_dir)
    files: dict[str, bytes] = {}
    for path in sorted(rego_root.rglob("*.rego")):
        if path.name.endswith("_test.rego") or not path.is_file():
            continue
        files[path.relative_to(rego_root).as_posix()] = path.read_bytes()
    if not files:
        raise BundleError(f"no Rego modules under {rego_root}")
    files[DATA_FILE] = canonical_json(compile_policies(policies_dir))
    return files


def compute_identity(
    rego_dir: Path | str, policies_dir: Path | str, *, label: str = DEFAULT_LABEL
) -> BundleIdentity:
    """The identity a build of these sources would have; needs no OPA.

    Raises:
        PolicyDataError: the policy data is invalid.
        BundleError: no Rego modules.
    """
    return identity_for(collect_sources(rego_dir, policies_dir), label)


def _run(argv: list[str], cwd: Path, what: str) -> str:
    try:
        completed = subprocess.run(  # noqa: S603 - fixed argv, binary chosen by the operator
            argv, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BundleError(f"{what}: cannot run {argv[0]}") from exc
    if completed.returncode != 0:
        output = (completed.stdout + completed.stderr).strip()
        raise BundleError(f"{what} failed:\n{output}")
    return completed.stdout


def compile_wasm(files: Mapping[str, bytes], opa_bin: Path, workdir: Path) -> bytes:
    """Compile the Rego modules of `files` to Wasm with one entrypoint per domain.

    The modules are staged under fixed relative paths so the Wasm (which embeds module
    paths for error locations) does not depend on where the build ran.

    Raises:
        BundleError: OPA refused the modules.
    """
    staging = workdir / "wasm-src"
    for path, content in files.items():
        if path.endswith(".rego"):
            target = staging / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
    argv = [str(opa_bin), "build", "-t", "wasm", "-o", "../wasm.tar.gz"]
    for entrypoint in ENTRYPOINTS:
        argv += ["-e", entrypoint]
    _run([*argv, "."], staging, "opa build -t wasm")
    wasm_files = read_tarball(workdir / "wasm.tar.gz")
    if WASM_FILE not in wasm_files:
        raise BundleError("opa build -t wasm produced no policy.wasm")
    return wasm_files[WASM_FILE]


def build_bundle(
    rego_dir: Path | str,
    policies_dir: Path | str,
    out_dir: Path | str,
    *,
    label: str,
    opa_bin: Path | str | None = None,
    run_tests: bool = True,
    tests_dir: Path | str | None = None,
    progress: Progress | None = None,
) -> BundleIdentity:
    """Validate, test and build a bundle into `out_dir` (see module docstring). The tests
    are `policy test`'s: the Rego tests and the tenant tests of `tests_dir` (default
    `<policies_dir>/tests`) against the compiled data.

    Raises:
        PolicyDataError: the policy data or a tenant test table is invalid.
        PolicyTestError: OPA refused a test module.
        OpaBinaryNotFound: no OPA binary.
        BundleError: `opa check`/`opa test`/`opa build` failed.
    """

    def say(message: str) -> None:
        if progress is not None:
            progress(message)

    if not label or "+" in label:
        raise BundleError("bundle label must be non-empty and contain no '+'")
    rego_root, out = Path(rego_dir).resolve(), Path(out_dir)
    opa = require_opa_binary(opa_bin)
    version = opa_version(opa)
    say(f"[1/6] validating policy data in {policies_dir}")
    files = collect_sources(rego_root, policies_dir)
    identity = identity_for(files, label)
    say(f"[2/6] checking Rego in {rego_root} (opa check --strict, OPA {version})")
    _run([str(opa), "check", "--strict", str(rego_root)], rego_root, "opa check --strict")
    if run_tests:
        say("[3/6] running the Rego tests and the tenant tests (engram-memory policy test)")
        report = run_policy_tests(rego_root, policies_dir, tests_dir, opa_bin=opa)
        if report.failed:
            raise BundleError("policy tests failed:\n" + "\n".join(describe_report(report)))
    else:
        say("[3/6] skipping Rego unit tests")
    with tempfile.TemporaryDirectory(prefix="engram-bundle-") as tmp:
        say(f"[4/6] compiling {len(ENTRYPOINTS)} entrypoints to Wasm (opa build -t wasm)")
        wasm = compile_wasm(files, opa, Path(tmp))
        say(f"[5/6] writing {BUNDLE_FILE} and {WASM_FILE} to {out}")
        out.mkdir(parents=True, exist_ok=True)
        write_tarball({**files, MANIFEST_FILE: manifest_bytes(identity)}, out / BUNDLE_FILE)
        (out / WASM_FILE).write_bytes(wasm)
    say(f"[6/6] writing {LOCK_FILE}: revision {identity.revision}")
    lock = {
        "format": LOCK_FORMAT,
        "label": label,
        "revision": identity.revision,
        "content_digest": identity.digest,
        "files": file_list(files),
        "bundle": {"path": BUNDLE_FILE, "sha256": sha256_hex((out / BUNDLE_FILE).read_bytes())},
        "wasm": {
            "path": WASM_FILE,
            "sha256": sha256_hex(wasm),
            "entrypoints": list(ENTRYPOINTS),
        },
        "opa_version": version,
    }
    (out / LOCK_FILE).write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n", "utf-8")
    return identity
