"""The checkpoint key: an Ed25519 key that signs audit checkpoints and export manifests.

The head anchor (store/anchors.py) is MACed with a key derived from the root key, which an
auditor does not hold; a checkpoint is signed with this separate key, whose PUBLIC half the
auditor keeps. Whoever can write the store can recompute the hash chains, but cannot sign a
checkpoint, so a checkpoint an auditor kept proves what the chains held when it was signed.

The private key is a PKCS#8 PEM file, mode 0600 (`ENGRAM_CHECKPOINT_KEY`, created by `host
init`); the public key is a SubjectPublicKeyInfo PEM file. The key id is the lowercase hex
sha256 of the 32 raw public key bytes, so anyone holding the public key can recompute it.
"""

from __future__ import annotations

import hashlib
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from engram_memory._internal.private_files import write_key_pair
from engram_memory.contract.exceptions import ConfigurationError

ALGORITHM = "Ed25519"
# Where a verifier finds the checkpoint public key it kept (flags say so in their help).
PUBLIC_KEY_VARIABLE = "ENGRAM_CHECKPOINT_PUBLIC_KEY"


def key_id_of(public_key: Ed25519PublicKey) -> str:
    """sha256 (hex) of the raw public key: the `key_id` every signature names."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class CheckpointPublicKey:
    """What an auditor holds: verifies checkpoint and manifest signatures."""

    public_key: Ed25519PublicKey

    @property
    def key_id(self) -> str:
        return key_id_of(self.public_key)

    def pem(self) -> str:
        return self.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode("ascii")

    def verifies(self, message: bytes, signature: bytes) -> bool:
        """True when `signature` is this key's Ed25519 signature of `message`."""
        try:
            self.public_key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    @classmethod
    def from_pem_file(cls, path: Path) -> CheckpointPublicKey:
        """The public key in `path` (a public key PEM, or the private key file itself).

        Raises:
            ConfigurationError: unreadable, or not an Ed25519 key.
        """
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"checkpoint public key {path} cannot be read") from exc
        if b"PRIVATE KEY" in data:
            return CheckpointSigningKey.from_pem_file(path).public
        try:
            key = serialization.load_pem_public_key(data)
        except ValueError as exc:
            raise ConfigurationError(f"checkpoint public key {path} is not a PEM key") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigurationError(f"checkpoint public key {path} is not an Ed25519 key")
        return cls(key)


@dataclass(frozen=True)
class CheckpointSigningKey:
    """The service's private checkpoint key."""

    private_key: Ed25519PrivateKey

    @property
    def public(self) -> CheckpointPublicKey:
        return CheckpointPublicKey(self.private_key.public_key())

    @property
    def key_id(self) -> str:
        return self.public.key_id

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)

    @classmethod
    def generate(cls) -> CheckpointSigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem_file(cls, path: Path) -> CheckpointSigningKey:
        """Read the private key, refusing a file others can read (like the root key).

        Raises:
            ConfigurationError: unreadable, readable by group/others, or not Ed25519.
        """
        try:
            if stat.S_IMODE(path.stat().st_mode) & 0o077:
                raise ConfigurationError(
                    f"checkpoint key {path} must not be readable by others (chmod 600)"
                )
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"checkpoint key {path} cannot be read") from exc
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"checkpoint key {path} is not an unencrypted PEM private key"
            ) from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigurationError(f"checkpoint key {path} is not an Ed25519 key")
        return cls(key)

    def write_pem_files(self, private_path: Path, public_path: Path) -> None:
        """Write the private key (0600, must not exist) and its public key (0644) beside it.

        Raises:
            FileExistsError: the private key file exists.
            OSError: either file cannot be written.
        """
        # The public half is for auditors.
        write_key_pair(private_path, public_path, self.private_key)
