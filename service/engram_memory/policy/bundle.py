"""Policy bundle: build, identify, verify.

A bundle directory holds three files:
- `bundle.tar.gz`: the Rego modules (tests excluded), `data.json` compiled from
  `policies/*.yaml`, and `.manifest` (`roots: ["engram"]`, `revision`), ready for
  `opa run --server --bundle`;
- `policy.wasm`: the same modules compiled by the pinned OPA, one entrypoint per domain;
- `bundle.lock.json`: the identity (label, revision, content digest, file list) and the
  sha256 of the two artifacts.

The content digest is `sha256:` + sha256 over the RFC 8785 JSON of the sorted list
`[{"path", "sha256"}]` of every bundle file except `.manifest` and `.signatures.json` (so
signing a bundle, `policy sign`, never changes its digest or revision). It depends on file contents
only (not on tar metadata, build time or OPA), so it is computable in pure Python from the
sources and an auditor can recompute it from the tarball. The revision is
`<label>+<content digest>`: the revision OPA reports proves which content it serves.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engram_memory.contract.canonical import canonical_json
from engram_memory.contract.exceptions import BundleError
from engram_memory.policy.engine import BundleIdentity

DOMAINS: tuple[str, ...] = (
    "discovery",
    "authz",
    "confirmation",
    "retention",
    "reconciliation",
    "semantic",
    "admission",
    "maintenance",
)
ENTRYPOINTS: tuple[str, ...] = tuple(f"engram/{domain}/decision" for domain in DOMAINS)
BUNDLE_FILE = "bundle.tar.gz"
WASM_FILE = "policy.wasm"
LOCK_FILE = "bundle.lock.json"
MANIFEST_FILE = ".manifest"
SIGNATURES_FILE = ".signatures.json"
DATA_FILE = "data.json"
LOCK_FORMAT = "engram-policy-bundle-lock/1"
DEFAULT_LABEL = "engram-default"
DEFAULT_BUNDLE_DIR = Path(__file__).resolve().parent / "_bundle"
# A bundle is Rego and compiled YAML: kilobytes to a few megabytes. Far above any real one,
# far below what would exhaust the service's memory.
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
MAX_MEMBERS = 10_000

Progress = Callable[[str], None]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_list(files: Mapping[str, bytes]) -> list[dict[str, str]]:
    return [{"path": path, "sha256": sha256_hex(files[path])} for path in sorted(files)]


def content_digest(files: Mapping[str, bytes]) -> str:
    """`sha256:` + sha256 of JCS(sorted [{path, sha256}]) over `files` (no `.manifest`, no
    `.signatures.json`)."""
    unsigned = (MANIFEST_FILE, SIGNATURES_FILE)
    listing = file_list({p: b for p, b in files.items() if p not in unsigned})
    return "sha256:" + sha256_hex(canonical_json(listing))


def identity_for(files: Mapping[str, bytes], label: str) -> BundleIdentity:
    digest = content_digest(files)
    return BundleIdentity(revision=f"{label}+{digest}", digest=digest)


def manifest_bytes(identity: BundleIdentity) -> bytes:
    manifest = {"revision": identity.revision, "roots": ["engram"], "rego_version": 1}
    return json.dumps(manifest, sort_keys=True).encode("utf-8")


def read_tarball(path: Path) -> dict[str, bytes]:
    """Regular files of a bundle tarball by bundle path (leading `/` stripped).

    Raises:
        BundleError: unreadable archive, or a member path that escapes the bundle.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BundleError(f"{path}: cannot read bundle archive") from exc
    return tarball_files(data, path)


def tarball_files(data: bytes, path: Path | str) -> dict[str, bytes]:
    """`read_tarball` over bytes already read (`path` only names them in errors), so a
    caller can verify and use the very same bytes.

    The archive is read member by member and each header's size is checked before its
    data is: a fleet's service fetches bundles from the network before it can check their
    signature (which is inside), so a small gzip that unpacks to gigabytes must be refused
    on its headers, not after it filled memory.

    Raises:
        BundleError: unreadable archive, a member path that escapes the bundle, or more
            than MAX_UNPACKED_BYTES / MAX_MEMBERS unpacked.
    """
    files: dict[str, bytes] = {}
    unpacked = members = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar:  # streaming: getmembers() would unpack everything first
                members += 1
                unpacked += max(member.size, 0)
                if unpacked > MAX_UNPACKED_BYTES or members > MAX_MEMBERS:
                    raise BundleError(f"{path}: bundle archive unpacks to more than allowed")
                if not member.isfile():
                    continue
                name = member.name.lstrip("/")
                if name.startswith("../") or "/../" in name or name in files:
                    raise BundleError(f"{path}: unsafe or duplicate member {member.name!r}")
                extracted = tar.extractfile(member)
                if extracted is None:
                    raise BundleError(f"{path}: unreadable member {member.name!r}")
                files[name] = extracted.read()
    except (OSError, tarfile.TarError) as exc:
        raise BundleError(f"{path}: cannot read bundle archive") from exc
    return files


def read_lock(bundle_dir: Path | str) -> dict[str, Any]:
    """The parsed `bundle.lock.json` of `bundle_dir`.

    Raises:
        BundleError: missing or not a lock document.
    """
    path = Path(bundle_dir) / LOCK_FILE
    try:
        lock = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{path}: cannot read bundle lock") from exc
    if not isinstance(lock, dict) or lock.get("format") != LOCK_FORMAT:
        raise BundleError(f"{path}: not a {LOCK_FORMAT} document")
    return lock


def load_bundle_identity(bundle_dir: Path | str) -> BundleIdentity:
    """The identity recorded in the lock (not re-verified; see `verify_bundle`).

    Raises:
        BundleError: missing or malformed lock.
    """
    lock = read_lock(bundle_dir)
    try:
        return BundleIdentity(revision=str(lock["revision"]), digest=str(lock["content_digest"]))
    except (KeyError, ValueError) as exc:
        raise BundleError(f"{bundle_dir}: malformed identity in {LOCK_FILE}") from exc


def read_artifacts(directory: Path) -> tuple[bytes, bytes]:
    """The bytes of a bundle directory's tarball and Wasm module.

    Raises:
        BundleError: either is missing or unreadable.
    """
    try:
        return (directory / BUNDLE_FILE).read_bytes(), (directory / WASM_FILE).read_bytes()
    except OSError as exc:
        raise BundleError(f"{directory}: missing bundle artifact") from exc


def verify_bundle(bundle_dir: Path | str) -> BundleIdentity:
    """Recompute the content digest from the tarball and check everything the lock binds:
    digest, revision, file list, manifest, tarball and Wasm sha256. Returns the identity.

    Raises:
        BundleError: any mismatch, or a missing/unreadable file.
    """
    directory = Path(bundle_dir)
    lock = read_lock(directory)
    identity = load_bundle_identity(directory)
    tar_path, wasm_path = directory / BUNDLE_FILE, directory / WASM_FILE
    tar_bytes, wasm = read_artifacts(directory)
    if sha256_hex(tar_bytes) != lock.get("bundle", {}).get("sha256"):
        raise BundleError(f"{tar_path}: sha256 differs from {LOCK_FILE}")
    if sha256_hex(wasm) != lock.get("wasm", {}).get("sha256"):
        raise BundleError(f"{wasm_path}: sha256 differs from {LOCK_FILE}")
    files = tarball_files(tar_bytes, tar_path)
    files.pop(SIGNATURES_FILE, None)  # checked by policy.signing when a key is configured
    manifest_raw = files.pop(MANIFEST_FILE, None)
    if content_digest(files) != identity.digest or file_list(files) != lock.get("files"):
        raise BundleError(f"{tar_path}: content digest differs from {LOCK_FILE}")
    try:
        manifest = json.loads(manifest_raw or b"")
    except ValueError as exc:
        raise BundleError(f"{tar_path}: unreadable .manifest") from exc
    if manifest.get("revision") != identity.revision or manifest.get("roots") != ["engram"]:
        raise BundleError(f"{tar_path}: .manifest revision or roots differ from {LOCK_FILE}")
    if identity.label != lock.get("label"):
        raise BundleError(f"{directory}: label differs from revision in {LOCK_FILE}")
    return identity


def bundle_data(bundle_dir: Path | str) -> bytes:
    """The `data.json` bytes of the bundle tarball.

    Raises:
        BundleError: unreadable archive or no data.json.
    """
    files = read_tarball(Path(bundle_dir) / BUNDLE_FILE)
    if DATA_FILE not in files:
        raise BundleError(f"{bundle_dir}: bundle has no {DATA_FILE}")
    return files[DATA_FILE]


def write_tarball(files: Mapping[str, bytes], target: Path) -> None:
    """A reproducible tar.gz: sorted members, zero mtimes/owners, fixed modes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in sorted(files):
            info = tarfile.TarInfo(name=path)
            info.size = len(files[path])
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(files[path]))
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0) as gz:
        gz.write(raw.getvalue())
    target.write_bytes(compressed.getvalue())
