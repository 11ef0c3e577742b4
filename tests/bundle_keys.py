"""A bundle signing key pair for tests: RSA 3072 (RS256), private key 0600."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def write_bundle_key_pair(directory: Path) -> tuple[Path, Path]:
    """(signing key, verification key) PEM files in `directory`."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    signing_key, verification_key = directory / "signing.pem", directory / "verification.pem"
    signing_key.touch(mode=0o600)
    signing_key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    verification_key.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return signing_key, verification_key
