"""Signing keys and signed bundles for the signing tests, and the forgeries they must catch.

A forgery here is what someone who can write the bundle directory (but holds no signing key)
can do: change, add or drop files and rewrite `.manifest` and the lock so that everything
the lock binds is consistent again. Only the signature can tell.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from engram_memory.policy.authoring.sign import sign_bundle
from engram_memory.policy.bundle import (
    BUNDLE_FILE,
    DEFAULT_BUNDLE_DIR,
    LOCK_FILE,
    MANIFEST_FILE,
    SIGNATURES_FILE,
    WASM_FILE,
    file_list,
    identity_for,
    manifest_bytes,
    read_lock,
    read_tarball,
    write_tarball,
)

KEY_ID = "compliance-2026"


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path


def make_key_pair(directory: Path, bits: int = 2048) -> KeyPair:
    """An RSA pair on disk with the modes the loaders demand (0600 / 0644)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    private, public = directory / "signing.pem", directory / "verification.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    private.chmod(0o600)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    public.chmod(0o644)
    return KeyPair(private, public)


def signed_copy(target: Path, keys: KeyPair, key_id: str = KEY_ID) -> Path:
    """A copy of the shipped bundle, signed with `keys`."""
    shutil.copytree(DEFAULT_BUNDLE_DIR, target)
    for path in target.iterdir():
        path.chmod(0o644)
    sign_bundle(target, keys.private, key_id)
    return target


def forge(directory: Path, change: Callable[[dict[str, bytes]], None]) -> None:
    """Apply `change` to the bundle files, then make `.manifest` and the lock consistent with
    the result (keeping the old `.signatures.json`), as a directory writer could."""
    files = read_tarball(directory / BUNDLE_FILE)
    change(files)
    lock = read_lock(directory)
    content = {p: b for p, b in files.items() if p not in (MANIFEST_FILE, SIGNATURES_FILE)}
    identity = identity_for(content, lock["label"])
    files[MANIFEST_FILE] = manifest_bytes(identity)
    write_tarball(files, directory / BUNDLE_FILE)
    lock.update(
        revision=identity.revision,
        content_digest=identity.digest,
        files=file_list(content),
    )
    lock["bundle"]["sha256"] = hashlib.sha256((directory / BUNDLE_FILE).read_bytes()).hexdigest()
    lock["wasm"]["sha256"] = hashlib.sha256((directory / WASM_FILE).read_bytes()).hexdigest()
    (directory / LOCK_FILE).write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")


def replace_token(directory: Path, token: str) -> None:
    """Put `token` in place of the bundle's signature, lock kept consistent."""

    def swap(files: dict[str, bytes]) -> None:
        files[SIGNATURES_FILE] = json.dumps({"signatures": [token]}).encode()

    forge(directory, swap)


def current_token(directory: Path) -> str:
    token: str = json.loads(read_tarball(directory / BUNDLE_FILE)[SIGNATURES_FILE])["signatures"][0]
    return token


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token_parts(token: str) -> tuple[dict[str, object], dict[str, object]]:
    header, payload, _ = token.split(".")
    padded = [part + "=" * (-len(part) % 4) for part in (header, payload)]
    return (
        json.loads(base64.urlsafe_b64decode(padded[0])),
        json.loads(base64.urlsafe_b64decode(padded[1])),
    )


def private_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777
