"""Wrapped item keys, one small file each, so that destroying a key really removes its bytes.

A row deleted from DuckDB lingers in freed blocks of the database file until they happen to
be reused, so a key kept there would not be irrecoverable when `forget` says it is. Here each
wrapped key is its own file: destruction overwrites it in place, flushes, unlinks it and
flushes the directory; only then is it reported `complete`.

File names are digests of (scope, item), so the directory listing reveals no ids. Files sit in
256 shard directories; each has a `.lock` file. Service operations (store, read, destroy) hold
it shared, rotation holds it exclusive while it re-wraps a batch, so a key destroyed during a
rotation is either gone before rotation reads it or destroyed after rotation replaced it; it
never comes back. `state.json` (atomically replaced, outside DuckDB so that rotation runs
beside a live server) names the root key and each scope's epoch that new key files use.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from engram_memory._internal.durable_files import fsync_directory, shred
from engram_memory.contract.exceptions import (
    KeyFileBroken,
    KeyStoreBusy,
    KeyStoreUnavailable,
    UnknownRootKey,
)
from engram_memory.crypto import keyfile
from engram_memory.crypto.destruction_pause import DestructionPause
from engram_memory.crypto.key_cache import OpenedKeys, file_identity, still_there
from engram_memory.crypto.keys import RootKey, scope_tag

KEY_SUFFIX = ".key"
KEYS_DIRECTORY = "keys"  # inside the data directory
STATE_FILE = "state.json"
LOCK_FILE = ".lock"
ROTATION_LOCK_FILE = ".rotation.lock"
_STATE_LOCK_FILE = ".state.lock"
# Leftovers of an interrupted write or rotation: copies of wrapped keys, destroyed on sight.
TEMPORARY_SUFFIXES = (".tmp", ".rot")
_STATE_FORMAT = 1


@dataclass
class KeyState:
    """Which root and which per-scope epoch new key files are wrapped under."""

    root_id: bytes | None = None
    epochs: dict[str, int] = field(default_factory=dict)  # scope tag hex -> epoch
    pending: list[str] = field(default_factory=list)  # "root" | "scope:<tag hex>"

    def epoch(self, tag: bytes) -> int:
        return self.epochs.get(tag.hex(), 0)

    def header_for(self, tag: bytes) -> keyfile.KeyFileHeader:
        assert self.root_id is not None
        return keyfile.KeyFileHeader(self.root_id, self.epoch(tag), tag)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": _STATE_FORMAT,
                "root_key_id": None if self.root_id is None else self.root_id.hex(),
                "epochs": dict(sorted(self.epochs.items())),
                "pending": sorted(set(self.pending)),
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> KeyState:
        """Raises: KeyStoreUnavailable: not a state file of this format."""
        try:
            raw = json.loads(text)
            if raw["format"] != _STATE_FORMAT:
                raise ValueError("format")
            root = raw["root_key_id"]
            epochs = {str(k): int(v) for k, v in raw["epochs"].items()}
            if any(v < 0 or v >= 2**32 for v in epochs.values()):
                raise ValueError("epoch")
            return cls(
                None if root is None else bytes.fromhex(root),
                epochs,
                [str(p) for p in raw["pending"]],
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KeyStoreUnavailable("key state file is malformed") from exc


def name_digest(scope_ref: str, item_id: str) -> bytes:
    return hashlib.sha256(f"{scope_ref}\0{item_id}".encode()).digest()


class KeyClaims:
    """Key files a call of this process is writing right now, one call per item at a time.

    This process is the store's only writer, so a claim tells the orphan sweep and a second
    call on the same item that a key without a committed owner row is still in flight.
    """

    def __init__(self) -> None:
        self._paths: set[Path] = set()
        self._lock = threading.Lock()

    def claim(self, path: Path) -> bool:
        """True if `path` was free and is now claimed by the caller."""
        with self._lock:
            if path in self._paths:
                return False
            self._paths.add(path)
            return True

    def release(self, path: Path) -> None:
        with self._lock:
            self._paths.discard(path)

    def held(self, path: Path) -> bool:
        with self._lock:
            return path in self._paths


class KeyStore:
    """Wrapped per-item keys under `<data_dir>/keys/`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.claims = KeyClaims()
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise KeyStoreUnavailable("key directory cannot be created") from exc
        # A backup's key copy holds destructions back (crypto/destruction_pause.py).
        self.destructions = DestructionPause()
        # Unwrapped keys of recent reads; every write and destruction here drops its entry.
        self.opened = OpenedKeys()

    @staticmethod
    def file_name(scope_ref: str, item_id: str) -> str:
        """The key file's name: a digest, so a listing reveals no ids."""
        return name_digest(scope_ref, item_id).hex() + KEY_SUFFIX

    def path_for(self, scope_ref: str, item_id: str) -> Path:
        name = self.file_name(scope_ref, item_id)
        return self.directory / name[:2] / name

    def holds(self, scope_ref: str, item_id: str) -> bool:
        """`path_for(...).exists()`, errors it ignores included, without its Path objects (a
        quarter of the time: the bulk import asks it for every item it creates)."""
        name = self.file_name(scope_ref, item_id)
        try:
            os.stat(os.path.join(self.directory, name[:2], name))
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
                return False
            raise
        return True

    # -- locks ---------------------------------------------------------------------------

    @contextmanager
    def shard_lock(self, shard: Path, *, exclusive: bool) -> Iterator[None]:
        """Hold a shard's lock (the shard directory must exist).

        Raises:
            KeyStoreUnavailable: the lock file cannot be opened.
        """
        with _flock(shard / LOCK_FILE, exclusive=exclusive, blocking=True):
            yield

    @contextmanager
    def rotation_lock(self) -> Iterator[None]:
        """One rotation or backup at a time; never waits.

        Raises:
            KeyStoreBusy: another rotation or backup holds it.
        """
        with _flock(self.directory / ROTATION_LOCK_FILE, exclusive=True, blocking=False):
            yield

    def shards(self) -> list[Path]:
        try:
            return sorted(p for p in self.directory.iterdir() if p.is_dir() and len(p.name) == 2)
        except OSError as exc:
            raise KeyStoreUnavailable("key directory cannot be listed") from exc

    # -- state -----------------------------------------------------------------------------

    def read_state(self) -> KeyState:
        """The current state; an empty one before the first key was stored.

        Raises:
            KeyStoreUnavailable: unreadable or malformed.
        """
        try:
            text = (self.directory / STATE_FILE).read_text(encoding="utf-8")
        except FileNotFoundError:
            return KeyState()
        except OSError as exc:
            raise KeyStoreUnavailable("key state cannot be read") from exc
        return KeyState.from_json(text)

    @contextmanager
    def update_state(self) -> Iterator[KeyState]:
        """Read-modify-write the state under its lock; replaced atomically on exit.

        Raises:
            KeyStoreUnavailable: it cannot be read or made durable.
        """
        with _flock(self.directory / _STATE_LOCK_FILE, exclusive=True, blocking=True):
            state = self.read_state()
            yield state
            write_durably(self.directory / STATE_FILE, state.to_json().encode(), ".tmp")

    def current_state(self, root: RootKey) -> KeyState:
        """The state new key files are wrapped under (recording `root` for the first key).

        Raises:
            KeyStoreUnavailable: it cannot be read or made durable.
        """
        state = self.read_state()
        if state.root_id is None:
            # The first key of this store: record the root it is wrapped under.
            with self.update_state() as fresh:
                if fresh.root_id is None:
                    fresh.root_id = root.key_id
            state = self.read_state()
        return state

    # -- item keys -------------------------------------------------------------------------

    def store_item_key(self, root: RootKey, scope_ref: str, item_id: str, data_key: bytes) -> None:
        """Wrap `data_key` under the state's root and the scope's epoch; store it durably.

        The state is read while the shard lock is held, so a rotation that flipped the epoch
        either finds this file in its sweep or this call already saw the new epoch.

        Raises:
            KeyStoreUnavailable: not durable, or the state names a root this ring lacks.
        """
        path = self.path_for(scope_ref, item_id)
        try:
            path.parent.mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            raise KeyStoreUnavailable("key directory cannot be created") from exc
        with self.shard_lock(path.parent, exclusive=False):
            state = self.current_state(root)
            header = state.header_for(scope_tag(scope_ref))
            try:
                blob = keyfile.wrap(root, header, name_digest(scope_ref, item_id), data_key)
            except UnknownRootKey as exc:
                raise KeyStoreUnavailable("key state names a root key not held") from exc
            self.opened.drop(scope_ref, item_id)
            write_durably(path, blob, ".tmp")

    def load_item_key(self, root: RootKey, scope_ref: str, item_id: str) -> bytes | None:
        """The data key, or None once destroyed (or never stored).

        Raises:
            KeyFileBroken: the file does not open (tampered, foreign, root not held).
            KeyStoreUnavailable: the file exists but cannot be read.
        """
        cached = self.opened.get(scope_ref, item_id)
        if cached is not None and still_there(cached[1]):
            return cached[0]  # the very file it was read from is still there, unchanged
        version = self.opened.version()
        identity = file_identity(self.path_for(scope_ref, item_id))
        blob = self.get(scope_ref, item_id)
        if blob is None:
            return None
        if keyfile.is_legacy(blob):
            data_key = keyfile.unwrap_legacy(root, blob, scope_ref, item_id)
        else:
            header, data_key = keyfile.unwrap(root, blob, name_digest(scope_ref, item_id))
            if header.tag != scope_tag(scope_ref):
                raise KeyFileBroken("key file of another scope")
        if identity is not None:
            self.opened.keep(scope_ref, item_id, data_key, identity, version)
        return data_key

    # -- raw files -------------------------------------------------------------------------

    def put(self, scope_ref: str, item_id: str, wrapped: bytes) -> None:
        """Store raw key file bytes durably (write a temporary file, fsync, rename).

        Raises:
            KeyStoreUnavailable: the key could not be made durable.
        """
        path = self.path_for(scope_ref, item_id)
        try:
            path.parent.mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            raise KeyStoreUnavailable("key directory cannot be created") from exc
        with self.shard_lock(path.parent, exclusive=False):
            self.opened.drop(scope_ref, item_id)
            write_durably(path, wrapped, ".tmp")

    def get(self, scope_ref: str, item_id: str) -> bytes | None:
        """The key file's bytes, or None once destroyed (or never stored).

        Raises:
            KeyStoreUnavailable: the file exists but cannot be read.
        """
        path = self.path_for(scope_ref, item_id)
        if not path.parent.is_dir():
            return None
        with self.shard_lock(path.parent, exclusive=False):
            try:
                return path.read_bytes()
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise KeyStoreUnavailable("key file cannot be read") from exc

    def destroy(self, scope_ref: str, item_id: str) -> bool:
        """Overwrite, flush and unlink the key file; True once no copy remains here.

        Returns False (destruction still pending) if the file system refused; the caller
        reports `pending` and a later destroy completes it.
        """
        # Dropped before (no read is served it from now on) and after (a read that opened the
        # file meanwhile cannot keep it: `OpenedKeys.keep` sees the version moved).
        self.opened.drop(scope_ref, item_id)
        try:
            path = self.path_for(scope_ref, item_id)
            if not path.parent.is_dir():
                return True
            try:
                with self.destructions.destroying(), self.shard_lock(path.parent, exclusive=False):
                    return shred(path)
            except KeyStoreUnavailable:
                return False
        finally:
            self.opened.drop(scope_ref, item_id)


def write_durably(path: Path, data: bytes, temporary_suffix: str) -> None:
    """Write to a temporary file, fsync, rename over `path`, fsync the directory.

    Raises:
        KeyStoreUnavailable: not durable.
    """
    temporary = path.with_name(path.name + temporary_suffix)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if os.write(fd, data) != len(data):
                raise OSError("short write")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        fsync_directory(path.parent)
    except OSError as exc:
        # A full disk leaves a partial (often empty) temporary: never leave it behind.
        shred(temporary)
        raise KeyStoreUnavailable("key file cannot be written") from exc


def replace_and_shred_old(path: Path, data: bytes) -> bool:
    """Atomically replace an existing file's content, then zero the old inode's bytes.

    A plain rename would leave the old wrapped key in freed blocks; this keeps the old inode
    open across the rename and overwrites it afterwards, as destruction does. Returns False
    (and writes nothing) if `path` no longer exists: a destroyed key is never recreated.

    Raises:
        KeyStoreUnavailable: the file system refused.
    """
    try:
        old = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise KeyStoreUnavailable("key file cannot be opened") from exc
    try:
        size = os.fstat(old).st_size
        write_durably(path, data, ".rot")
        os.pwrite(old, b"\0" * size, 0)
        os.fsync(old)
    except OSError as exc:
        raise KeyStoreUnavailable("key file cannot be replaced") from exc
    finally:
        os.close(old)
    return True


@contextmanager
def _flock(path: Path, *, exclusive: bool, blocking: bool) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise KeyStoreUnavailable("lock file cannot be opened") from exc
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, mode if blocking else mode | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise KeyStoreBusy("key store busy") from exc
        except OSError as exc:
            raise KeyStoreUnavailable("lock cannot be taken") from exc
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
