"""Files only their owner can read: the data directory is 0700 and every file in it 0600.

Three layers, because no single one is enough:
- `serve`, `admin`, `audit`, `import` and `host` run under umask 077 (cli.py), so whatever
  DuckDB creates on its own (the WAL, its temporary directory, attached copies) is private;
- files the service writes itself are created with explicit modes (0600 files, 0700
  directories), so they stay private in a process that did not set the umask (tests, an
  embedding application);
- at start-up (`app.open_service`) the data directory is checked: an entry owned by another
  user is refused before anything is written; once the store has passed its checks (so a
  refused start changes nothing), anything found looser than 0700/0600 is tightened, one
  log line per fix naming the path and the old and new mode (never content).

Another user's entry is refused rather than re-owned: a process that can chown is root, and a
store that root's files reach (or an attacker pre-created) cannot be trusted to be ours. The
operator fixes ownership (docs/operators/run.md, "Files and ownership") and starts again.

A trusted file the service only reads (the host public keys) may be readable by everyone,
but nobody except its owner (this user or root) may write it: whoever can rewrite the trusted
host keys can mint invocation tokens.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engram_memory.contract.exceptions import ConfigurationError

log = logging.getLogger("engram_memory.files")

PRIVATE_UMASK = 0o077
DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
# Past this many fixes, one summary line stands for the rest (a `chmod -R 755` of a store
# with many key files must not flood the log).
MAX_FIX_LINES = 100
OWNERSHIP_FIX = "docs/operators/run.md, 'Files and ownership'"


@dataclass(frozen=True)
class ModeFix:
    """One entry that was found looser than allowed and tightened."""

    path: Path
    old_mode: int
    new_mode: int


def use_private_umask() -> int:
    """Set the process umask to 077; return the previous one."""
    return os.umask(PRIVATE_UMASK)


def make_private(path: Path) -> None:
    """Tighten a file another component created for us (DuckDB's COPY/ATTACH) to 0600.

    Raises:
        OSError: the file exists but its mode cannot be changed.
    """
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) & ~FILE_MODE:
        os.chmod(path, FILE_MODE)


def make_private_directory(path: Path) -> None:
    """Create `path` and its missing parents as 0700 directories; existing ones are kept.

    (`Path.mkdir(parents=True)` would create the parents with the umask's mode.)

    Raises:
        OSError: it cannot be created.
    """
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True, mode=DIRECTORY_MODE)


def write_key_pair(private_path: Path, public_path: Path, private_key: Ed25519PrivateKey) -> None:
    """Write `private_key` as unencrypted PKCS#8 PEM, 0600, and its public key as PEM beside
    it, readable by all and writable by its owner only whatever the umask: a trusted public
    key file that others could rewrite is refused (`check_trusted_file`).

    Raises:
        FileExistsError: the private key file exists (a private key is never overwritten).
        OSError: either file cannot be written.
    """
    private_pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(private_pem)
    public_pem = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    fd = os.open(public_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(public_pem)
    os.chmod(public_path, stat.S_IMODE(os.stat(public_path).st_mode) & ~0o022)


def check_trusted_file(path: Path, what: str) -> None:
    """Refuse a trusted input file that someone other than its owner could rewrite.

    Raises:
        ConfigurationError: writable by group or others, or owned by a user that is neither
            this process's user nor root (one line, naming the file and the fix).
    """
    try:
        info = path.stat()
    except OSError as exc:
        raise ConfigurationError(f"{what} file {path} cannot be read") from exc
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise ConfigurationError(
            f"{what} file {path} must not be writable by group or others (chmod 644)"
        )
    if info.st_uid not in (os.geteuid(), 0):
        raise ConfigurationError(
            f"{what} file {path} is owned by uid {info.st_uid}, neither this user "
            f"(uid {os.geteuid()}) nor root (chown it; see {OWNERSHIP_FIX})"
        )


def secure_data_dir(data_dir: Path, *, tighten: bool = True) -> list[ModeFix]:
    """Refuse a data directory holding another user's entries; tighten loose modes.

    With `tighten` False only ownership is checked. See `check_data_dir`.

    Raises:
        ConfigurationError: as `check_data_dir` and `DataDirEntries.tighten`.
    """
    entries = check_data_dir(data_dir)
    return entries.tighten() if tighten else []


def check_data_dir(data_dir: Path) -> DataDirEntries:
    """Refuse a data directory holding another user's entries; what it holds is returned,
    to tighten once the store is known to be served (one walk for both: at 100k key files
    each walk is ~0.5 s of a start).

    A missing directory is left for the store to create (0700). Symbolic links inside are
    checked for ownership but never followed, so a link cannot make us chmod a file
    elsewhere. Nothing is changed here: a start that the store then refuses (held by
    another process, damaged, behind its anchor) leaves its files exactly as it found them,
    modes included.

    Raises:
        ConfigurationError: the directory or an entry in it is owned by another user, or it
            cannot be listed.
    """
    try:
        root = data_dir.stat()
    except FileNotFoundError:
        return DataDirEntries(data_dir, [])
    except OSError as exc:
        raise ConfigurationError(f"data directory {data_dir} cannot be examined") from exc
    if not stat.S_ISDIR(root.st_mode):
        return DataDirEntries(data_dir, [])  # the store reports it is not a directory
    entries: list[tuple[Path | _Entry, os.stat_result]] = [
        (data_dir, root),
        *_entries_below(data_dir),
    ]
    uid = os.geteuid()
    for path, info in entries:
        if info.st_uid != uid:
            raise ConfigurationError(
                f"{path} in the data directory is owned by uid {info.st_uid}, not by this "
                f"user (uid {uid}); refusing to use it (see {OWNERSHIP_FIX})"
            )
    return DataDirEntries(data_dir, entries)


@dataclass(frozen=True)
class DataDirEntries:
    """A data directory's entries with the lstat its ownership check saw."""

    data_dir: Path
    entries: list[tuple[Path | _Entry, os.stat_result]]

    def tighten(self) -> list[ModeFix]:
        """Tighten what was looser than 0700/0600 when listed (an entry removed since is
        skipped; entries made since are the store's own, made private).

        Raises:
            ConfigurationError: a mode cannot be changed.
        """
        # Most entries are 0600 files: passed over without a call (100k key files at start).
        fixes = [
            fix
            for path, info in self.entries
            if info.st_mode & 0o177 and (fix := _tighten(path, info)) is not None
        ]
        for fix in fixes[:MAX_FIX_LINES]:
            log.warning("file modes: %s was %04o, now %04o", fix.path, fix.old_mode, fix.new_mode)
        if len(fixes) > MAX_FIX_LINES:
            log.warning(
                "file modes: %d more entries in %s tightened to 0700/0600",
                len(fixes) - MAX_FIX_LINES,
                self.data_dir,
            )
        return fixes


class _Entry(str):
    """An entry's path as the listing gave it (what `os.chmod` and messages need)."""


def _entries_below(directory: Path) -> list[tuple[Path | _Entry, os.stat_result]]:
    """Every entry under `directory` with its lstat, never following symbolic links.

    Raises:
        ConfigurationError: a directory cannot be listed.
    """
    found: list[tuple[Path | _Entry, os.stat_result]] = []
    pending = [directory]
    while pending:
        current = pending.pop()
        try:
            with os.scandir(current) as listing:
                for entry in listing:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed meanwhile (a server already running on it)
                    # A Path per entry cost seconds over 100k key files: made when needed.
                    found.append((_Entry(entry.path), info))
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(Path(entry.path))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigurationError(f"data directory entry {current} cannot be listed") from exc
    return found


def _tighten(path: Path | _Entry, info: os.stat_result) -> ModeFix | None:
    """Raises: ConfigurationError: the mode cannot be changed."""
    if stat.S_ISLNK(info.st_mode):
        return None  # a link's own mode means nothing; its target is not ours to change
    allowed = DIRECTORY_MODE if stat.S_ISDIR(info.st_mode) else FILE_MODE
    old = stat.S_IMODE(info.st_mode)
    if not old & ~allowed:
        return None
    # Not a link (checked above) and, since entries come parent first, every directory
    # between the data directory and `path` is already 0700: nobody else can swap it now.
    try:
        os.chmod(path, allowed)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigurationError(f"mode of {path} cannot be tightened to {allowed:04o}") from exc
    return ModeFix(Path(path), old, allowed)
