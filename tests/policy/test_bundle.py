"""Bundle identity: a content digest over files, bound into the revision and the lock."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from engram_memory.contract.canonical import canonical_json
from engram_memory.contract.exceptions import BundleError, ConfigurationError
from engram_memory.policy.authoring.build import build_bundle, collect_sources, compute_identity
from engram_memory.policy.authoring.default_bundle import (
    default_bundle_dir,
    default_bundle_is_current,
)
from engram_memory.policy.bundle import (
    BUNDLE_FILE,
    DEFAULT_BUNDLE_DIR,
    LOCK_FILE,
    MAX_MEMBERS,
    MAX_UNPACKED_BYTES,
    WASM_FILE,
    load_bundle_identity,
    read_tarball,
    tarball_files,
    verify_bundle,
    write_tarball,
)
from engram_memory.policy.engine import BundleIdentity
from tests.policy.conftest import POLICIES_DIR, REGO_DIR


def _copy_sources(target: Path) -> tuple[Path, Path]:
    rego, policies = target / "rego", target / "policies"
    shutil.copytree(REGO_DIR, rego)
    shutil.copytree(POLICIES_DIR, policies)
    return rego, policies


def test_the_content_digest_is_deterministic_wherever_the_sources_live(tmp_path: Path) -> None:
    here = compute_identity(REGO_DIR, POLICIES_DIR)
    rego, policies = _copy_sources(tmp_path)
    assert compute_identity(rego, policies) == here
    assert compute_identity(REGO_DIR, POLICIES_DIR) == here


def test_the_revision_embeds_the_content_digest() -> None:
    identity = compute_identity(REGO_DIR, POLICIES_DIR, label="release-7")
    assert identity.revision == f"release-7+{identity.digest}"
    assert identity.label == "release-7"


def test_the_digest_is_sha256_over_the_canonical_file_list() -> None:
    files = collect_sources(REGO_DIR, POLICIES_DIR)
    listing = [
        {"path": path, "sha256": hashlib.sha256(files[path]).hexdigest()} for path in sorted(files)
    ]
    expected = "sha256:" + hashlib.sha256(canonical_json(listing)).hexdigest()
    assert compute_identity(REGO_DIR, POLICIES_DIR).digest == expected


def test_test_files_are_not_part_of_the_bundle() -> None:
    files = collect_sources(REGO_DIR, POLICIES_DIR)
    assert "data.json" in files
    assert "engram/authz/authz.rego" in files
    assert not [path for path in files if path.endswith("_test.rego")]


def test_any_content_change_changes_the_digest(tmp_path: Path) -> None:
    rego, policies = _copy_sources(tmp_path)
    before = compute_identity(rego, policies)
    acme = policies / "acme.yaml"
    acme.write_text(acme.read_text("utf-8").replace("ttl_seconds: 120", "ttl_seconds: 60"))
    assert compute_identity(rego, policies).digest != before.digest


def test_tar_metadata_does_not_change_the_digest(tmp_path: Path) -> None:
    files = collect_sources(REGO_DIR, POLICIES_DIR)
    write_tarball(files, tmp_path / "a.tar.gz")
    assert read_tarball(tmp_path / "a.tar.gz") == files


def test_a_bundle_identity_must_bind_its_digest() -> None:
    digest = "sha256:" + "a" * 64
    with pytest.raises(ValueError, match="revision"):
        BundleIdentity(revision="label-only", digest=digest)
    with pytest.raises(ValueError, match="digest"):
        BundleIdentity(revision="x+sha256:zz", digest="sha256:zz")


def test_the_shipped_bundle_is_current_with_the_sources() -> None:
    assert default_bundle_is_current()


def test_the_shipped_bundle_verifies_against_its_lock() -> None:
    assert verify_bundle(default_bundle_dir()) == load_bundle_identity(DEFAULT_BUNDLE_DIR)


def test_changed_sources_make_the_shipped_bundle_not_current(tmp_path: Path) -> None:
    rego, policies = _copy_sources(tmp_path)
    (policies / "globex.yaml").unlink()
    assert not default_bundle_is_current(rego, policies)


def _tampered_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(DEFAULT_BUNDLE_DIR, copy)
    return copy


def test_a_replaced_wasm_fails_verification(tmp_path: Path) -> None:
    copy = _tampered_copy(tmp_path)
    (copy / WASM_FILE).write_bytes((copy / WASM_FILE).read_bytes() + b"\0")
    with pytest.raises(BundleError):
        verify_bundle(copy)


def test_a_rebuilt_tarball_with_other_data_fails_verification(tmp_path: Path) -> None:
    copy = _tampered_copy(tmp_path)
    files = read_tarball(copy / BUNDLE_FILE)
    files["data.json"] = b'{"engram":{"config":{"tenants":{}}}}'
    write_tarball(files, copy / BUNDLE_FILE)
    lock = json.loads((copy / LOCK_FILE).read_text("utf-8"))
    lock["bundle"]["sha256"] = hashlib.sha256((copy / BUNDLE_FILE).read_bytes()).hexdigest()
    (copy / LOCK_FILE).write_text(json.dumps(lock), "utf-8")
    with pytest.raises(BundleError):
        verify_bundle(copy)


def test_a_lock_claiming_another_revision_fails_verification(tmp_path: Path) -> None:
    copy = _tampered_copy(tmp_path)
    lock = json.loads((copy / LOCK_FILE).read_text("utf-8"))
    lock["revision"] = "other+" + lock["content_digest"]
    (copy / LOCK_FILE).write_text(json.dumps(lock), "utf-8")
    with pytest.raises(BundleError):
        verify_bundle(copy)


def test_a_missing_lock_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        load_bundle_identity(tmp_path)


@pytest.mark.opa
def test_building_twice_gives_identical_artifacts(opa_bin: Path, tmp_path: Path) -> None:
    steps: list[str] = []
    first = build_bundle(
        REGO_DIR, POLICIES_DIR, tmp_path / "a", label="x", opa_bin=opa_bin, progress=steps.append
    )
    rego, policies = _copy_sources(tmp_path / "src")
    second = build_bundle(rego, policies, tmp_path / "b", label="x", opa_bin=opa_bin)
    assert first == second
    assert first == compute_identity(REGO_DIR, POLICIES_DIR, label="x")
    for name in (BUNDLE_FILE, WASM_FILE, LOCK_FILE):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert verify_bundle(tmp_path / "a") == first
    assert len(steps) == 6


@pytest.mark.opa
def test_the_shipped_wasm_is_what_the_pinned_opa_compiles(opa_bin: Path, tmp_path: Path) -> None:
    identity = build_bundle(
        REGO_DIR, POLICIES_DIR, tmp_path, label="engram-default", opa_bin=opa_bin
    )
    assert identity == load_bundle_identity(DEFAULT_BUNDLE_DIR)
    assert (tmp_path / WASM_FILE).read_bytes() == (DEFAULT_BUNDLE_DIR / WASM_FILE).read_bytes()
    fresh, shipped = tmp_path / BUNDLE_FILE, DEFAULT_BUNDLE_DIR / BUNDLE_FILE
    assert read_tarball(fresh) == read_tarball(shipped)


@pytest.mark.opa
def test_a_label_with_a_plus_is_refused(opa_bin: Path, tmp_path: Path) -> None:
    with pytest.raises(BundleError):
        build_bundle(REGO_DIR, POLICIES_DIR, tmp_path, label="a+b", opa_bin=opa_bin)


def _gzip_of_headers(*infos: tarfile.TarInfo) -> bytes:
    """A gzip of tar headers whose sizes claim data that is not there (what a bomb's
    headers look like before its data is unpacked)."""
    raw = b"".join(info.tobuf(format=tarfile.USTAR_FORMAT) for info in infos)
    return gzip.compress(raw, mtime=0)


class _Zeros(io.RawIOBase):
    """`size` zero bytes, read in pieces (a bomb's content, never held in memory at once)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


def test_a_bundle_archive_that_unpacks_past_the_limit_is_refused_before_it_is_unpacked(
    tmp_path: Path,
) -> None:
    bomb = tmp_path / "bomb.tar.gz"
    member = tarfile.TarInfo("data.json")
    member.size = MAX_UNPACKED_BYTES + 1
    with (
        gzip.open(bomb, "wb", compresslevel=1) as packed,
        tarfile.open(fileobj=packed, mode="w", format=tarfile.USTAR_FORMAT) as tar,
    ):
        tar.addfile(member, io.BufferedReader(_Zeros(member.size)))
    data = bomb.read_bytes()
    assert len(data) < MAX_UNPACKED_BYTES // 100  # small on the wire
    with pytest.raises(BundleError):
        tarball_files(data, "fetched.tar.gz")


def test_a_bundle_archive_of_too_many_members_is_refused() -> None:
    infos = []
    for index in range(MAX_MEMBERS + 1):
        info = tarfile.TarInfo(f"m{index}.rego")
        info.type = tarfile.DIRTYPE  # no data blocks: the headers alone are counted
        infos.append(info)
    with pytest.raises(BundleError):
        tarball_files(_gzip_of_headers(*infos), "fetched.tar.gz")
