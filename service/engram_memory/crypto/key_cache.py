"""Item keys already unwrapped, in memory, so a read does not open and unwrap a key file.

Held by the key store (crypto/keystore.py) and kept exact by it: every write or destruction
of a key file drops that item's entry, before and after the file changes, so a key is never
served from memory once its file is gone (crypto-shredding holds for the cache too). A key
read from its file is kept only if nothing was dropped since before that read began
(`version`), so a read racing a destruction cannot put the destroyed key back. Bounded by a
number of keys (least recently used first); 0 turns it off.

A key file changed behind the store's back (removed, replaced or rewritten by hand or by
another process) is noticed too: each entry keeps the file's identity when it was read
(inode, size, modification time in ns), and a hit costs one `stat` that must still match;
otherwise the file is read again, and a removed or damaged file fails as it always did.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

# ~250 bytes each with their keys: 16 MiB at most by default (ENGRAM_READ_CACHE_KEYS).
DEFAULT_MAX_KEYS = 65_536

_Key = tuple[str, str]
# (path, inode, size, modification time in ns) of a key file when its key was read: a hit
# re-checks it with one `stat` of that path, without deriving the path again.
FileIdentity = tuple[str, int, int, int]


def file_identity(path: Path | str) -> FileIdentity | None:
    """(path, inode, size, mtime in ns) of a key file, None if it is absent or unreadable."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return str(path), found.st_ino, found.st_size, found.st_mtime_ns


def still_there(identity: FileIdentity) -> bool:
    """Whether the file a key was read from is there still, unchanged."""
    return file_identity(identity[0]) == identity


class OpenedKeys:
    """Data keys by (scope_ref, item_id), LRU, bounded by count."""

    def __init__(self, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self._lock = threading.Lock()
        self._keys: OrderedDict[_Key, tuple[bytes, FileIdentity]] = OrderedDict()
        self._max_keys = max(0, max_keys)
        self._version = 0

    def get(self, scope_ref: str, item_id: str) -> tuple[bytes, FileIdentity] | None:
        """(data key, its file's identity when read), if held."""
        key = (scope_ref, item_id)
        with self._lock:
            entry = self._keys.get(key)
            if entry is not None:
                self._keys.move_to_end(key)
            return entry

    def version(self) -> int:
        """Take it before reading a key file; pass it to `keep` with what was read."""
        with self._lock:
            return self._version

    def keep(
        self,
        scope_ref: str,
        item_id: str,
        data_key: bytes,
        identity: FileIdentity,
        version: int,
    ) -> None:
        """Keep a key read from a file whose identity (taken before the read) is `identity`."""
        with self._lock:
            if self._version != version or not self._max_keys:
                return
            self._keys[(scope_ref, item_id)] = (data_key, identity)
            self._keys.move_to_end((scope_ref, item_id))
            while len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)

    def drop(self, scope_ref: str, item_id: str) -> None:
        """The item's key file is about to change or has changed."""
        with self._lock:
            self._version += 1
            self._keys.pop((scope_ref, item_id), None)

    def resize(self, max_keys: int) -> None:
        with self._lock:
            self._version += 1
            self._max_keys = max(0, max_keys)
            while len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)

    def holds(self, scope_ref: str, item_id: str) -> bool:
        """Whether the item's key is in memory (tests check what a forget left)."""
        with self._lock:
            return (scope_ref, item_id) in self._keys

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)
