"""Bundle signing keys: loading them safely and making a new pair (`policy keygen`).

RS256 (RSA PKCS#1 v1.5 with SHA-256) is the one algorithm: it is OPA's default for
`opa sign` and `opa run --verification-key`, so an operator needs no `--signing-alg`
anywhere, and it is deterministic, so signing the same bundle with the same key gives the
same bytes (ECDSA would not). Keys under 2048 bits are refused; `keygen` makes 3072-bit
keys. The algorithm is fixed by the key type, never read from a token.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from engram_memory._internal.private_files import check_trusted_file
from engram_memory.contract.exceptions import SigningKeyError

ALGORITHM = "RS256"
MIN_KEY_BITS = 2048
KEYGEN_BITS = 3072
SIGNING_KEY_FILE = "bundle-signing.pem"
VERIFICATION_KEY_FILE = "bundle-verification.pem"
# Key ids end up in log lines, lock files and OPA configuration keys: keep them plain.
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}")


@dataclass(frozen=True)
class VerificationKey:
    """The public key bundles must be signed with, and the id signatures must name."""

    key_id: str
    public_key: rsa.RSAPublicKey
    path: Path  # handed to a spawned OPA as --verification-key

    @property
    def fingerprint(self) -> str:
        """`sha256:` + hex sha256 of the key's DER SubjectPublicKeyInfo (public; loggable)."""
        return public_key_fingerprint(self.public_key)


def public_key_fingerprint(public_key: rsa.RSAPublicKey) -> str:
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(der).hexdigest()


def check_key_id(key_id: str) -> str:
    """Return `key_id` if it is 1-128 characters of letters, digits and `._:@/+-`.

    Raises:
        SigningKeyError: anything else.
    """
    if not _KEY_ID.fullmatch(key_id):
        raise SigningKeyError(
            "key id must be 1-128 characters of letters, digits and ._:@/+- "
            "(starting with a letter or digit)"
        )
    return key_id


def _rsa_strong_enough(key: rsa.RSAPublicKey | rsa.RSAPrivateKey, path: Path) -> None:
    if key.key_size < MIN_KEY_BITS:
        raise SigningKeyError(f"{path}: RSA key has {key.key_size} bits, at least 2048 needed")


def load_verification_key(path: Path, key_id: str) -> VerificationKey:
    """Read a PEM RSA public key that bundle signatures must verify with.

    Whoever can rewrite this file can make the service trust their bundles, so it must not
    be writable by group or others and must belong to this user or root.

    Raises:
        SigningKeyError: bad key id, not a PEM RSA public key, or under 2048 bits.
        ConfigurationError: unreadable, writable by others, or owned by another user.
    """
    check_key_id(key_id)
    check_trusted_file(path, "bundle verification key")
    try:
        public_key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise SigningKeyError(f"{path}: not a PEM public key") from exc
    if not isinstance(public_key, rsa.RSAPublicKey):
        raise SigningKeyError(f"{path}: bundle verification key must be RSA (RS256)")
    _rsa_strong_enough(public_key, path)
    return VerificationKey(key_id=key_id, public_key=public_key, path=path)


def load_signing_key(path: Path) -> rsa.RSAPrivateKey:
    """Read an unencrypted PEM RSA private key that only its owner can read.

    Raises:
        SigningKeyError: readable by group/others, unreadable, encrypted, not RSA, or
            under 2048 bits (the message never quotes the file).
    """
    try:
        if path.stat().st_mode & 0o077:
            raise SigningKeyError(f"signing key {path} must not be readable by others (chmod 600)")
        pem = path.read_bytes()
    except OSError as exc:
        raise SigningKeyError(f"signing key {path} cannot be read") from exc
    try:
        private_key = serialization.load_pem_private_key(pem, password=None)
    except TypeError as exc:
        raise SigningKeyError(f"signing key {path} is encrypted; give an unencrypted PEM") from exc
    except ValueError as exc:
        raise SigningKeyError(f"signing key {path} is not a PEM private key") from exc
    if not isinstance(private_key, rsa.RSAPrivateKey):
        raise SigningKeyError(f"signing key {path} must be RSA (RS256)")
    _rsa_strong_enough(private_key, path)
    return private_key


def _write_new(path: Path, content: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(path, mode)  # whatever the umask was


def generate_key_pair(out_dir: Path) -> tuple[Path, Path, str]:
    """Make a 3072-bit RSA pair in `out_dir` (created 0700 if missing): the private key
    0600, the public key 0644. Returns (private path, public path, public fingerprint).

    Raises:
        SigningKeyError: either file exists already (a key is never overwritten) or the
            directory cannot be written.
    """
    private_path, public_path = out_dir / SIGNING_KEY_FILE, out_dir / VERIFICATION_KEY_FILE
    for existing in (private_path, public_path):
        if existing.exists():
            raise SigningKeyError(f"{existing} exists; a key is never overwritten")
    private_key = rsa.generate_private_key(public_exponent=65537, key_size=KEYGEN_BITS)
    private_pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_new(private_path, private_pem, 0o600)
        _write_new(public_path, public_pem, 0o644)
    except OSError as exc:
        raise SigningKeyError(f"cannot write a key pair into {out_dir}") from exc
    return private_path, public_path, public_key_fingerprint(private_key.public_key())
