"""Wrapped item keys, one small file each, so that destroying a key really removes its bytes.

A row deleted from DuckDB lingers in freed blocks of the database file until they happen to
be reused, so a key kept there would not be irrecoverable when `forget` says it is. Here each
wrapped key is its own file: destruction overwrites it in place, flushes, unlinks it and
flushes the directory; only then is it reported `complete`.

File names are digests of (scope, item), so the directory listing reveals no ids.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from engram_memory.contract.errors import EngramError

_SUFFIX = ".key"
KEYS_DIRECTORY = "keys"  # inside the data directory


class KeyStoreUnavailable(EngramError):
    """A key file could not be written or read; maps to STORE_UNAVAILABLE."""


class KeyStore:
    """Wrapped per-item keys under `<data_dir>/keys/`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise KeyStoreUnavailable("key directory cannot be created") from exc

    def _path(self, scope_ref: str, item_id: str) -> Path:
        name = hashlib.sha256(f"{scope_ref}\0{item_id}".encode()).hexdigest()
        return self.directory / name[:2] / (name + _SUFFIX)

    def put(self, scope_ref: str, item_id: str, wrapped: bytes) -> None:
        """Store a wrapped key durably (write to a temporary file, fsync, rename).

        Raises:
            KeyStoreUnavailable: the key could not be made durable.
        """
        path = self._path(scope_ref, item_id)
        temporary = path.with_suffix(".tmp")
        try:
            path.parent.mkdir(exist_ok=True, mode=0o700)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, wrapped)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, path)
            _fsync_directory(path.parent)
        except OSError as exc:
            raise KeyStoreUnavailable("key file cannot be written") from exc

    def get(self, scope_ref: str, item_id: str) -> bytes | None:
        """The wrapped key, or None once destroyed (or never stored).

        Raises:
            KeyStoreUnavailable: the file exists but cannot be read.
        """
        try:
            return self._path(scope_ref, item_id).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KeyStoreUnavailable("key file cannot be read") from exc

    def destroy(self, scope_ref: str, item_id: str) -> bool:
        """Overwrite, flush and unlink the key file; True once no copy remains here.

        Returns False (destruction still pending) if the file system refused; the caller
        reports `pending` and a later destroy completes it.
        """
        path = self._path(scope_ref, item_id)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return True
        except OSError:
            return False
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"\0" * size)
                os.fsync(fd)
            finally:
                os.close(fd)
            path.unlink()
            _fsync_directory(path.parent)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
