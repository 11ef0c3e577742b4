"""Key hierarchy: host root key -> per-scope keys (HKDF) -> per-item data keys (random, wrapped).

Only per-item keys are stored, and only wrapped. Destroying an item's wrapped key leaves its
sealed body undecryptable (crypto-shredding); nothing else has to be found and overwritten.
"""

from __future__ import annotations

import base64
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from engram_memory.contract.errors import ConfigurationError

KEY_BYTES = 32
_ROOT_KEY_HEADER = "engram-root-key-v1:"


def _hkdf(root: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(root)


@dataclass(frozen=True)
class RootKey:
    """The host-provided root secret. `repr` never shows the bytes."""

    material: bytes

    def __repr__(self) -> str:
        return "RootKey(<redacted>)"

    def scope_wrapping_key(self, scope_ref: str) -> bytes:
        return _hkdf(self.material, b"engram-memory/scope-wrap/v1\0" + scope_ref.encode("utf-8"))

    def scope_index_key(self, scope_ref: str) -> bytes:
        """Keys the blind lexical index: terms are stored as HMACs under this key."""
        return _hkdf(self.material, b"engram-memory/blind-index/v1\0" + scope_ref.encode("utf-8"))

    def page_cursor_secret(self) -> bytes:
        return _hkdf(self.material, b"engram-memory/page-cursor/v1\0")

    @classmethod
    def load(cls, path: Path) -> RootKey:
        """Read a root key file (`engram-root-key-v1:<base64url of 32 bytes>`).

        Raises:
            ConfigurationError: unreadable, malformed, or readable by group/others.
        """
        try:
            if path.stat().st_mode & 0o077:
                raise ConfigurationError(
                    f"root key {path} must not be readable by others (chmod 600)"
                )
            text = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"root key {path} cannot be read") from exc
        if not text.startswith(_ROOT_KEY_HEADER):
            raise ConfigurationError(f"root key {path} is not an engram root key file")
        try:
            material = base64.urlsafe_b64decode(text.removeprefix(_ROOT_KEY_HEADER) + "==")
        except ValueError as exc:
            raise ConfigurationError(f"root key {path} is not valid base64url") from exc
        if len(material) != KEY_BYTES:
            raise ConfigurationError(f"root key {path} must hold exactly 32 bytes")
        return cls(material)

    @classmethod
    def create(cls, path: Path) -> RootKey:
        """Create a new random root key file with mode 0600 (refuses to overwrite).

        Raises:
            ConfigurationError: the file exists or cannot be written.
        """
        material = secrets.token_bytes(KEY_BYTES)
        text = _ROOT_KEY_HEADER + base64.urlsafe_b64encode(material).decode("ascii").rstrip("=")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise ConfigurationError(f"root key {path} cannot be created") from exc
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(text + "\n")
        return cls(material)

    @classmethod
    def load_or_create(cls, path: Path) -> RootKey:
        return cls.load(path) if path.exists() else cls.create(path)
