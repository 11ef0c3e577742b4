"""`policy sign`: sign a built bundle as OPA expects (`.signatures.json`, RS256 JWT).

Verification is the runtime's (`policy/signing.py`); signing is an author's act.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import jwt

from engram_memory.contract.exceptions import BundleError
from engram_memory.policy.bundle import (
    BUNDLE_FILE,
    LOCK_FILE,
    SIGNATURES_FILE,
    WASM_FILE,
    read_artifacts,
    read_lock,
    sha256_hex,
    tarball_files,
    verify_bundle,
    write_tarball,
)
from engram_memory.policy.opa_hash import HASH_ALGORITHM, opa_file_hash
from engram_memory.policy.signing import WASM_CLAIM, verified_files
from engram_memory.policy.signing_keys import (
    ALGORITHM,
    VerificationKey,
    check_key_id,
    load_signing_key,
    public_key_fingerprint,
)


def _file_entry(name: str, content: bytes) -> dict[str, str]:
    return {"name": name, "hash": opa_file_hash(name, content), "algorithm": HASH_ALGORITHM}


def _tarball_bytes(files: dict[str, bytes]) -> bytes:
    """The reproducible tarball `write_tarball` makes of `files`, as bytes."""
    with tempfile.TemporaryDirectory(prefix="engram-sign-") as tmp:
        write_tarball(files, Path(tmp) / BUNDLE_FILE)
        return (Path(tmp) / BUNDLE_FILE).read_bytes()


def _atomic_write(target: Path, content: bytes) -> None:
    """Replace `target` by `content` through a temporary file beside it (a reader never
    sees half a tarball or lock).

    Raises:
        BundleError: the directory cannot be written.
    """
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        os.close(fd)
    except OSError as exc:
        raise BundleError(f"{target.parent}: cannot write the signed bundle") from exc
    try:
        Path(temporary).write_bytes(content)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise BundleError(f"{target}: cannot write the signed bundle") from exc
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def sign_bundle(bundle_dir: Path, signing_key: Path, key_id: str) -> None:
    """Add `.signatures.json` to `bundle_dir/bundle.tar.gz` (replacing an earlier one) and
    record the signature in the lock. The bundle must first verify against its lock, so a
    tampered bundle is never signed. RS256 is deterministic: same bundle and key, same bytes.

    Raises:
        SigningKeyError: unusable signing key or key id.
        BundleError: the bundle does not match its lock (or changed while being signed).
    """
    check_key_id(key_id)
    private_key = load_signing_key(signing_key)
    directory = Path(bundle_dir)
    identity = verify_bundle(directory)
    lock = read_lock(directory)
    tar_bytes, wasm = read_artifacts(directory)
    if (
        sha256_hex(tar_bytes) != lock["bundle"]["sha256"]
        or sha256_hex(wasm) != lock["wasm"]["sha256"]
    ):
        raise BundleError(f"{directory}: bundle changed while being signed")
    files = tarball_files(tar_bytes, directory / BUNDLE_FILE)
    files.pop(SIGNATURES_FILE, None)
    claims = {
        "files": [_file_entry(name, files[name]) for name in sorted(files)],
        "keyid": key_id,
        WASM_CLAIM: {"name": WASM_FILE, "hash": sha256_hex(wasm), "algorithm": HASH_ALGORITHM},
    }
    payload = json.dumps(claims, sort_keys=True, separators=(",", ":")).encode("utf-8")
    token = jwt.PyJWS().encode(payload, private_key, algorithm=ALGORITHM, headers={"kid": key_id})
    signed = {**files, SIGNATURES_FILE: json.dumps({"signatures": [token]}).encode("utf-8")}
    # Check our own output with the public half before replacing anything.
    public = VerificationKey(key_id, private_key.public_key(), directory)
    if verified_files(signed, public)[0] != identity:
        raise BundleError(f"{directory}: signed bundle does not carry the lock's identity")
    signed_tar = _tarball_bytes(signed)
    _atomic_write(directory / BUNDLE_FILE, signed_tar)
    lock["bundle"]["sha256"] = sha256_hex(signed_tar)
    lock["signature"] = {
        "algorithm": ALGORITHM,
        "file": SIGNATURES_FILE,
        "key_id": key_id,
        "public_key_sha256": public_key_fingerprint(private_key.public_key()),
    }
    text = json.dumps(lock, indent=2, sort_keys=True) + "\n"
    _atomic_write(directory / LOCK_FILE, text.encode("utf-8"))
