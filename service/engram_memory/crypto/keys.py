"""Key hierarchy: host root key -> per-scope wrapping keys (HKDF) -> per-item data keys.

Only per-item keys are stored, and only wrapped. Destroying an item's wrapped key leaves its
sealed body undecryptable (crypto-shredding); nothing else has to be found and overwritten.

The root key file (ENGRAM_ROOT_KEY, mode 0600) holds, one per line:

    engram-root-key-v1:<base64url 32 bytes>     current root: new key files are wrapped here
    engram-root-key-v1:<base64url 32 bytes>     previous roots (optional): read-only, so a
                                                 server keeps reading during a root rotation
    engram-index-root-v1:<base64url 32 bytes>   optional: the stable secret of the blind
                                                 index and of page cursors

Rotating the root re-wraps item keys; it does not touch the blind index, whose term hashes
were computed under the index root. The index root therefore never rotates with the root:
files written by `host init` carry an independent random one, and a file without that line
(written before index roots existed) uses its current root as index root, which the rotated
file then carries as its explicit `engram-index-root-v1` line.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from engram_memory.contract.exceptions import ConfigurationError, UnknownRootKey

KEY_BYTES = 32
KEY_ID_BYTES = 8
_ROOT_KEY_HEADER = "engram-root-key-v1:"
_INDEX_ROOT_HEADER = "engram-index-root-v1:"


def _hkdf(root: bytes, info: bytes, salt: bytes | None = None) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=info).derive(root)


def root_key_id(material: bytes) -> bytes:
    """A non-secret name for a root key: 8 bytes of a domain-separated SHA-256."""
    return hashlib.sha256(b"engram-memory/root-key-id/v1\0" + material).digest()[:KEY_ID_BYTES]


def scope_tag(scope_ref: str) -> bytes:
    """16 bytes naming a scope in key file headers and the epoch state (no scope text)."""
    return hashlib.sha256(b"engram-memory/scope-tag/v1\0" + scope_ref.encode("utf-8")).digest()[:16]


def _encode(header: str, material: bytes) -> str:
    return header + base64.urlsafe_b64encode(material).decode("ascii").rstrip("=")


def _decode(path: Path, text: str, header: str) -> bytes:
    try:
        material = base64.urlsafe_b64decode(text.removeprefix(header) + "==")
    except ValueError as exc:
        raise ConfigurationError(f"root key {path} is not valid base64url") from exc
    if len(material) != KEY_BYTES:
        raise ConfigurationError(f"root key {path} must hold exactly 32 bytes per key")
    return material


@dataclass(frozen=True)
class RootKey:
    """The host-provided root secrets (current, previous, index root). `repr` hides them."""

    material: bytes
    previous: tuple[bytes, ...] = ()
    index_root: bytes | None = None  # None: the current root serves (files before index roots)

    def __repr__(self) -> str:
        return f"RootKey(id={self.key_id.hex()}, previous={len(self.previous)}, <redacted>)"

    @property
    def key_id(self) -> bytes:
        """The id of the current root, under which new key files are wrapped."""
        return root_key_id(self.material)

    @property
    def known_ids(self) -> tuple[bytes, ...]:
        return tuple(root_key_id(m) for m in (self.material, *self.previous))

    @property
    def stable_index_root(self) -> bytes:
        return self.material if self.index_root is None else self.index_root

    def material_for(self, key_id: bytes) -> bytes:
        """Raises: UnknownRootKey: no root of this ring has that id."""
        for material in (self.material, *self.previous):
            if root_key_id(material) == key_id:
                return material
        raise UnknownRootKey("root key id not held")

    def epoch_wrapping_key(self, key_id: bytes, tag: bytes, epoch: int) -> bytes:
        """The scope wrapping key of key files v2: HKDF(root, scope tag, epoch).

        Raises:
            UnknownRootKey: `key_id` is not in this ring.
        """
        info = b"engram-memory/scope-wrap/v2\0" + tag + epoch.to_bytes(4, "big")
        return _hkdf(self.material_for(key_id), info)

    def legacy_wrapping_keys(self, scope_ref: str) -> list[bytes]:
        """Scope keys of headerless (v1) key files, under every root of the ring."""
        info = b"engram-memory/scope-wrap/v1\0" + scope_ref.encode("utf-8")
        return [_hkdf(m, info) for m in (self.material, *self.previous)]

    def scope_wrapping_key(self, scope_ref: str) -> bytes:
        """The v1 scope key under the current root (headerless key files)."""
        return self.legacy_wrapping_keys(scope_ref)[0]

    def scope_index_key(self, scope_ref: str) -> bytes:
        """Keys the blind lexical index: terms are stored as HMACs under this key."""
        info = b"engram-memory/blind-index/v1\0" + scope_ref.encode("utf-8")
        return _hkdf(self.stable_index_root, info)

    def scope_vector_key(self, scope_ref: str) -> bytes:
        """Seals the semantic vectors kept in the store (store/record_vectors.py). From the
        stable index root, like the index key: a rotation must not make every vector
        unreadable (they would all be re-embedded at the next start)."""
        info = b"engram-memory/semantic-vector/v1\0" + scope_ref.encode("utf-8")
        return _hkdf(self.stable_index_root, info)

    def forgotten_digest_key(self, scope_ref: str) -> bytes:
        """Keys the digests a forgotten record or withdrawn candidate keeps for the
        tombstoned-content guard (core/forgotten.py). From the stable index root: the keyed
        forms cannot be recomputed once the plain digests are gone, so this never rotates."""
        info = b"engram-memory/forgotten-digest/v1\0" + scope_ref.encode("utf-8")
        return _hkdf(self.stable_index_root, info)

    def page_cursor_secret(self) -> bytes:
        return _hkdf(self.stable_index_root, b"engram-memory/page-cursor/v1\0")

    def head_anchor_key(self) -> bytes:
        """MACs the head anchor file (store/anchors.py). From the stable index root, so a
        root rotation does not make an existing anchor unverifiable."""
        return _hkdf(self.stable_index_root, b"engram-memory/head-anchor/v1\0")

    def call_log_key(self) -> bytes:
        """Chains the call log's records (store/call_log.py). From the stable index root, like
        the head anchor's, so a root rotation leaves an existing log verifiable."""
        return _hkdf(self.stable_index_root, b"engram-memory/call-log/v1\0")

    def kept_index_key(self) -> bytes:
        """Seals the search index kept between a clean stop and the next start
        (core/index_keeping.py). From the stable index root, like the vectors' key it
        stands in for."""
        return _hkdf(self.stable_index_root, b"engram-memory/kept-index/v1\0")

    def archive_key(self, key_id: bytes, salt: bytes) -> bytes:
        """The key of one backup archive (its own label, a per-archive salt).

        Raises:
            UnknownRootKey: `key_id` is not in this ring.
        """
        return _hkdf(self.material_for(key_id), b"engram-memory/backup/v1\0", salt=salt)

    def rotated(self) -> RootKey:
        """A new ring: a fresh random current root, this ring's roots as previous ones, and
        this ring's index root carried over explicitly (so search and cursors keep working)."""
        return RootKey(
            secrets.token_bytes(KEY_BYTES),
            previous=(self.material, *self.previous),
            index_root=self.stable_index_root,
        )

    def without_previous(self) -> RootKey:
        return RootKey(self.material, index_root=self.stable_index_root)

    def file_text(self) -> str:
        lines = [_encode(_ROOT_KEY_HEADER, m) for m in (self.material, *self.previous)]
        if self.index_root is not None:
            lines.append(_encode(_INDEX_ROOT_HEADER, self.index_root))
        return "\n".join(lines) + "\n"

    @classmethod
    def load(cls, path: Path) -> RootKey:
        """Read a root key file: root lines (first = current), an optional index root line.

        Raises:
            ConfigurationError: unreadable, malformed, or readable by group/others.
        """
        try:
            if path.stat().st_mode & 0o077:
                raise ConfigurationError(
                    f"root key {path} must not be readable by others (chmod 600)"
                )
            text = path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"root key {path} cannot be read") from exc
        roots: list[bytes] = []
        index_root: bytes | None = None
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(_ROOT_KEY_HEADER):
                roots.append(_decode(path, line, _ROOT_KEY_HEADER))
            elif line.startswith(_INDEX_ROOT_HEADER) and index_root is None:
                index_root = _decode(path, line, _INDEX_ROOT_HEADER)
            else:
                raise ConfigurationError(f"root key {path} is not an engram root key file")
        if not roots:
            raise ConfigurationError(f"root key {path} is not an engram root key file")
        if len(set(roots)) != len(roots):
            raise ConfigurationError(f"root key {path} lists a root key twice")
        return cls(roots[0], tuple(roots[1:]), index_root)

    def write_new(self, path: Path) -> None:
        """Write this ring to a new file with mode 0600 (refuses to overwrite).

        Raises:
            ConfigurationError: the file exists or cannot be written.
        """
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise ConfigurationError(f"root key {path} cannot be created") from exc
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(self.file_text())
            handle.flush()
            os.fsync(handle.fileno())

    @classmethod
    def create(cls, path: Path) -> RootKey:
        """Create a new random root key file (with its own index root), mode 0600.

        Raises:
            ConfigurationError: the file exists or cannot be written.
        """
        key = cls(secrets.token_bytes(KEY_BYTES), index_root=secrets.token_bytes(KEY_BYTES))
        key.write_new(path)
        return key

    @classmethod
    def load_or_create(cls, path: Path) -> RootKey:
        return cls.load(path) if path.exists() else cls.create(path)
