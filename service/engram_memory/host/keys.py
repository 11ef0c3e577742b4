"""Host signing keys: the trust anchor for invocation contexts and confirmations.

The operator names which host public keys the service trusts (`ENGRAM_HOST_KEYS`: a PEM file
with one or more Ed25519 public keys, or a JWKS file). Keys are addressed by `kid`; for PEM
keys the `kid` is the RFC 7638 JWK thumbprint, so a host and the service agree on it without
coordination.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from engram_memory._internal.private_files import check_trusted_file, write_key_pair
from engram_memory.contract.exceptions import ConfigurationError


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def public_jwk(key: Ed25519PublicKey) -> dict[str, str]:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw)}


def key_thumbprint(key: Ed25519PublicKey) -> str:
    """RFC 7638 thumbprint: sha256 over the required members in lexicographic order."""
    members = public_jwk(key)
    canonical = json.dumps(members, sort_keys=True, separators=(",", ":")).encode("ascii")
    return _b64url(hashlib.sha256(canonical).digest())


@dataclass(frozen=True)
class HostKeyring:
    """The trusted host public keys, by `kid`, and the audience this store answers to.

    `audience` (ENGRAM_STORE_AUDIENCE): the store's own name in invocation tokens' `aud`. When
    one host key is trusted by several stores, a token spent on one must not be accepted by
    another: with an audience set, a token must name it; a token naming any audience is
    accepted only by the store of that audience (host/context.py).
    """

    keys: Mapping[str, Ed25519PublicKey]
    audience: str | None = None

    def get(self, kid: str | None) -> Ed25519PublicKey | None:
        if kid is None:
            # A single-key ring needs no kid: the common one-host deployment.
            return next(iter(self.keys.values())) if len(self.keys) == 1 else None
        return self.keys.get(kid)

    @classmethod
    def from_file(cls, path: Path, audience: str | None = None) -> HostKeyring:
        """Load trusted keys from a PEM bundle or a JWKS document.

        Raises:
            ConfigurationError: unreadable file, writable by group/others or owned by
                another user (whoever rewrites it can mint tokens), no Ed25519 key, or a
                non-Ed25519 key.
        """
        check_trusted_file(path, "host keys")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"host keys file {path} cannot be read") from exc
        keys = _parse_jwks(text) if text.lstrip().startswith("{") else _parse_pem_bundle(text)
        if not keys:
            raise ConfigurationError(f"host keys file {path} holds no Ed25519 public key")
        return cls(keys, audience)


def _parse_pem_bundle(text: str) -> dict[str, Ed25519PublicKey]:
    keys: dict[str, Ed25519PublicKey] = {}
    marker = "-----END PUBLIC KEY-----"
    for block in text.split(marker)[:-1]:
        try:
            key = serialization.load_pem_public_key((block + marker).strip().encode("ascii"))
        except ValueError as exc:
            raise ConfigurationError("host keys PEM holds an unreadable key") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigurationError("host keys must be Ed25519 (EdDSA)")
        keys[key_thumbprint(key)] = key
    return keys


def _parse_jwks(text: str) -> dict[str, Ed25519PublicKey]:
    try:
        document = json.loads(text)
        entries = document["keys"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError('host keys JWKS is not a {"keys": [...]} document') from exc
    keys: dict[str, Ed25519PublicKey] = {}
    for entry in entries:
        if (
            not isinstance(entry, dict)
            or entry.get("kty") != "OKP"
            or entry.get("crv") != "Ed25519"
        ):
            raise ConfigurationError("host keys must be Ed25519 (EdDSA) JWKs")
        try:
            key = Ed25519PublicKey.from_public_bytes(_b64url_decode(str(entry["x"])))
        except (KeyError, ValueError) as exc:
            raise ConfigurationError("host keys JWKS holds an unreadable key") from exc
        keys[str(entry.get("kid") or key_thumbprint(key))] = key
    return keys


@dataclass(frozen=True)
class HostSigningKey:
    """A host's private key and the `kid` the service knows it by."""

    private_key: Ed25519PrivateKey
    kid: str

    @classmethod
    def generate(cls) -> HostSigningKey:
        key = Ed25519PrivateKey.generate()
        return cls(key, key_thumbprint(key.public_key()))

    @classmethod
    def from_pem_file(cls, path: Path) -> HostSigningKey:
        """Raises: ConfigurationError: unreadable or not an Ed25519 private key."""
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"host signing key {path} cannot be read") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigurationError("host signing key must be Ed25519")
        return cls(key, key_thumbprint(key.public_key()))

    def write_pem_files(self, private_path: Path, public_path: Path) -> None:
        """Write the private key 0600 and the public key beside it (for ENGRAM_HOST_KEYS).

        Raises:
            FileExistsError: the private key file exists.
            OSError: either file cannot be written.
        """
        write_key_pair(private_path, public_path, self.private_key)
